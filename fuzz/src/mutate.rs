//! `quick`'s input generator: a seeded PRNG and blind mutations of seed
//! inputs (bit flips, byte insert/delete/overwrite with interesting values,
//! arithmetic, tokens of the text formats, splicing two seeds, truncation).
//! Nothing here sees coverage: it is random mutation, which finds shallow
//! bugs near the seeds; deep runs are libFuzzer's (`cargo fuzz`).

/// SplitMix64 (Steele, Lea, Flood 2014): small, fast, and every seed,
/// including 0, gives a full-period sequence. Not for anything secret.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform-enough in `0..n`; 0 when `n` is 0.
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// One of `items` (which must not be empty).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// FNV-1a, 64 bits: names crash files and tells repeated inputs apart.
pub fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

const BYTES: &[u8] = &[
    0x00, 0x01, 0x02, 0x7f, 0x80, 0x81, 0xfe, 0xff, 0x20, 0x0a, 0x0d,
];

const WORDS: &[u64] = &[
    0,
    1,
    2,
    0x7f,
    0x80,
    0xff,
    0x100,
    512,
    1024,
    1468,
    1500,
    0x7fff,
    0x8000,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    u64::MAX,
];

/// Pieces of the text formats (JSON, YAML, HTTP, the lease file) and of
/// numbers at their edges, inserted or written over the input.
const TOKENS: &[&str] = &[
    "\r\n",
    "\n",
    "\r\n\r\n",
    ": ",
    ":",
    ",",
    "{",
    "}",
    "[",
    "]",
    "\"",
    "'",
    "\\",
    "\\u0000",
    "\\ud800",
    "null",
    "true",
    "false",
    "-",
    "0",
    "-1",
    "-0",
    "1e999",
    "0.5",
    "65535",
    "65536",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999d",
    "0s",
    "%",
    "%00",
    "%2F",
    "/",
    "..",
    "../",
    "*",
    "&a",
    "*a",
    "!!binary",
    "<<: ",
    "~",
    "---\n",
    "? ",
    "|",
    "- ",
    "  ",
    "\t",
    "#",
    "\u{0}",
    "\u{feff}",
    "\u{10ffff}",
    "é",
    "::",
    "0.0.0.0",
    "255.255.255.255",
    "::1",
    "/0",
    "/33",
    "00:00:00:00:00:00",
    "ff:ff:ff:ff:ff:ff",
    "HTTP/1.1",
    "Host: ",
    "Connection: close",
    "Transfer-Encoding: chunked",
    "Content-Length: ",
    "Range: bytes=",
];

/// Makes inputs for one target from its seeds.
#[derive(Debug)]
pub struct Mutator {
    pub rng: Rng,
    /// Inputs never grow past this many bytes.
    pub max_len: usize,
}

impl Mutator {
    /// A new input: one seed (or the splice of two), then 1 to 8 stacked
    /// mutations. `seeds` must not be empty.
    pub fn input(&mut self, seeds: &[Vec<u8>]) -> Vec<u8> {
        let mut out = self.rng.pick(seeds).clone();
        let n = 1 + self.rng.below(8);
        for _ in 0..n {
            self.mutate(&mut out, seeds);
        }
        out.truncate(self.max_len);
        out
    }

    fn pos(&mut self, v: &[u8]) -> usize {
        self.rng.below(v.len() + 1)
    }

    /// One mutation of `v` in place.
    pub fn mutate(&mut self, v: &mut Vec<u8>, seeds: &[Vec<u8>]) {
        let r = &mut self.rng;
        match r.below(14) {
            // A bit flipped.
            0 if !v.is_empty() => {
                let i = r.below(v.len());
                v[i] ^= 1 << r.below(8);
            }
            // A byte overwritten: random, or an interesting one.
            1 if !v.is_empty() => {
                let i = r.below(v.len());
                v[i] = r.next_u64() as u8;
            }
            2 if !v.is_empty() => {
                let i = r.below(v.len());
                v[i] = *r.pick(BYTES);
            }
            // Bytes inserted: random, or an interesting one repeated.
            3 => {
                let i = self.pos(v);
                let k = 1 + self.rng.below(4);
                for _ in 0..k {
                    let b = self.rng.next_u64() as u8;
                    v.insert(i, b);
                }
            }
            4 => {
                let i = self.pos(v);
                let b = *self.rng.pick(BYTES);
                let long = self.rng.below(8) == 0;
                let k = 1 + self.rng.below(if long { 300 } else { 4 });
                v.splice(i..i, std::iter::repeat_n(b, k));
            }
            // A range deleted.
            5 if !v.is_empty() => {
                let i = r.below(v.len());
                let k = 1 + r.below((v.len() - i).min(16));
                v.drain(i..i + k);
            }
            // Small arithmetic on a byte.
            6 if !v.is_empty() => {
                let i = r.below(v.len());
                let d = 1 + r.below(16) as u8;
                v[i] = if r.below(2) == 0 {
                    v[i].wrapping_add(d)
                } else {
                    v[i].wrapping_sub(d)
                };
            }
            // An interesting 16, 32 or 64-bit value, either byte order,
            // written over or inserted.
            7 | 8 => {
                let w = *r.pick(WORDS);
                let width = *r.pick(&[2usize, 4, 8]);
                let b = if r.below(2) == 0 {
                    w.to_be_bytes()[8 - width..].to_vec()
                } else {
                    w.to_le_bytes()[..width].to_vec()
                };
                self.put(v, &b);
            }
            // A token of the text formats, written over or inserted.
            9 | 10 => {
                let t = self.rng.pick(TOKENS).as_bytes().to_vec();
                self.put(v, &t);
            }
            // A run of ASCII digits replaced by an edge number.
            11 => {
                let digits: Vec<usize> = (0..v.len()).filter(|&i| v[i].is_ascii_digit()).collect();
                if digits.is_empty() {
                    return;
                }
                let mut s = *self.rng.pick(&digits);
                while s > 0 && v[s - 1].is_ascii_digit() {
                    s -= 1;
                }
                let mut e = s;
                while e < v.len() && v[e].is_ascii_digit() {
                    e += 1;
                }
                let w = self.rng.pick(WORDS).to_string();
                v.splice(s..e, w.into_bytes());
            }
            // Spliced with another seed: this one's head, that one's tail.
            12 => {
                let other = self.rng.pick(seeds);
                let i = self.pos(v);
                let j = self.rng.below(other.len() + 1);
                v.truncate(i);
                v.extend_from_slice(&other[j..]);
            }
            // A chunk of the input copied elsewhere in it, or the input cut.
            13 if !v.is_empty() => {
                if r.below(3) == 0 {
                    let i = r.below(v.len());
                    v.truncate(i);
                } else {
                    let i = r.below(v.len());
                    let k = 1 + r.below((v.len() - i).min(64));
                    let chunk = v[i..i + k].to_vec();
                    let at = self.pos(v);
                    v.splice(at..at, chunk);
                }
            }
            _ => {
                let i = self.pos(v);
                let b = self.rng.next_u64() as u8;
                v.insert(i, b);
            }
        }
    }

    /// `b` written over `v` at a random place (growing it if needed), or
    /// inserted there.
    fn put(&mut self, v: &mut Vec<u8>, b: &[u8]) {
        let i = self.pos(v);
        if self.rng.below(2) == 0 {
            v.splice(i..i, b.iter().copied());
        } else {
            let end = (i + b.len()).min(v.len());
            v.splice(i..end, b.iter().copied());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_inputs() {
        let seeds = vec![b"GET / HTTP/1.1\r\n\r\n".to_vec(), vec![0u8; 40]];
        let run = |seed| {
            let mut m = Mutator {
                rng: Rng::new(seed),
                max_len: 100,
            };
            (0..1000).map(|_| m.input(&seeds)).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        assert!(run(7).iter().all(|i| i.len() <= 100));
    }
}
