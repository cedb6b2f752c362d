//! Block accounting for one read transfer: which blocks to send next, given
//! the ACKs that arrive. Pure, so the protocol's corner cases (duplicate
//! ACKs, partial windows, block-number rollover) are tested without sockets.
//!
//! Blocks are numbered from 1 as absolute `u64`s; the wire carries the low
//! 16 bits, so block 65536 goes out as 0 (the rollover tftpd-hpa, atftp,
//! curl, iPXE and EDK2 expect). An ACK's wire number is mapped back into the
//! window in flight, which is always shorter than 65536 blocks, so the
//! mapping is unambiguous.

use std::ops::RangeInclusive;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// The final block (short, possibly empty).
    last: u64,
    /// Highest block the client acknowledged (0 before any).
    acked: u64,
    /// Highest block sent so far in the current window.
    sent: u64,
    size: u64,
}

/// What to do after an ACK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The final block is acknowledged: the transfer is complete.
    Done,
    /// Send these blocks (a new window, or the rest of a partly
    /// acknowledged one, per RFC 7440).
    Send(RangeInclusive<u64>),
    /// A duplicate or stale ACK: send nothing. Answering duplicates is the
    /// "sorcerer's apprentice" bug (RFC 1123 4.2.3.1) that doubles every
    /// block after one delayed ACK; lost windows are resent on timeout.
    Ignore,
    /// An ACK for a block not sent yet (a confused or forged client): send
    /// nothing, the transfer goes on; the server counts it.
    NotSent,
}

impl Window {
    /// A file of `len` bytes in blocks of `blksize`, `windowsize` blocks per
    /// window (1 = RFC 1350 lock-step).
    pub fn new(len: u64, blksize: u16, windowsize: u16) -> Window {
        Window {
            last: len / u64::from(blksize.max(1)) + 1,
            acked: 0,
            sent: 0,
            size: u64::from(windowsize.max(1)),
        }
    }

    pub fn last_block(&self) -> u64 {
        self.last
    }

    /// The next window, from the first unacknowledged block: the first
    /// window at the start, or a retransmission after a timeout.
    pub fn resend(&mut self) -> RangeInclusive<u64> {
        let from = self.acked + 1;
        self.sent = (self.acked + self.size).min(self.last);
        from..=self.sent
    }

    pub fn on_ack(&mut self, wire: u16) -> Step {
        let ahead = u64::from(wire.wrapping_sub(self.acked as u16));
        if ahead == 0 {
            return Step::Ignore;
        }
        if ahead > self.sent - self.acked {
            // Behind the acknowledged block by less than half the number
            // space, and not before block 0: an old ACK; otherwise one for
            // a block never sent.
            let behind = (self.acked as u16).wrapping_sub(wire);
            return if behind < 0x8000 && u64::from(behind) <= self.acked {
                Step::Ignore
            } else {
                Step::NotSent
            };
        }
        self.acked += ahead;
        if self.acked == self.last {
            Step::Done
        } else {
            Step::Send(self.resend())
        }
    }

    /// The wire number of an absolute block.
    pub fn wire(block: u64) -> u16 {
        block as u16
    }

    /// Byte offset and length of an absolute block in a file of `len` bytes.
    pub fn span(block: u64, blksize: u16, len: u64) -> (u64, usize) {
        let off = (block - 1) * u64::from(blksize);
        (
            off,
            len.saturating_sub(off).min(u64::from(blksize)) as usize,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_count_includes_the_short_or_empty_final_block() {
        assert_eq!(Window::new(0, 512, 1).last_block(), 1);
        assert_eq!(Window::new(511, 512, 1).last_block(), 1);
        assert_eq!(Window::new(512, 512, 1).last_block(), 2);
        assert_eq!(Window::new(513, 512, 1).last_block(), 2);
        assert_eq!(Window::span(2, 512, 513), (512, 1));
        assert_eq!(Window::span(2, 512, 512), (512, 0));
        assert_eq!(Window::span(1, 512, 10), (0, 10));
    }

    #[test]
    fn lock_step_ignores_duplicate_acks() {
        let mut w = Window::new(2000, 512, 1);
        assert_eq!(w.resend(), 1..=1);
        // Our timer fired and block 1 went out twice: both ACKs come back.
        assert_eq!(w.on_ack(1), Step::Send(2..=2));
        assert_eq!(w.on_ack(1), Step::Ignore);
        assert_eq!(w.on_ack(0), Step::Ignore);
        // An ACK for a block never sent is ignored too, and told apart.
        assert_eq!(w.on_ack(5), Step::NotSent);
        assert_eq!(w.on_ack(3), Step::NotSent);
        // Behind block 0 is before the file: never sent either.
        assert_eq!(w.on_ack(60000), Step::NotSent);
        assert_eq!(w.on_ack(2), Step::Send(3..=3));
        assert_eq!(w.on_ack(3), Step::Send(4..=4));
        assert_eq!(w.on_ack(4), Step::Done);
    }

    #[test]
    fn windows_advance_and_resume_after_a_partial_ack() {
        let mut w = Window::new(10 * 100 + 5, 100, 4);
        assert_eq!(w.last_block(), 11);
        assert_eq!(w.resend(), 1..=4);
        assert_eq!(w.on_ack(4), Step::Send(5..=8));
        // Block 7 was lost: the client acknowledges 6; resume from 7.
        assert_eq!(w.on_ack(6), Step::Send(7..=10));
        // A late ACK of 8 from the first attempt is now ahead by 2 and
        // inside the window: it acknowledges 7 and 8.
        assert_eq!(w.on_ack(8), Step::Send(9..=11));
        assert_eq!(w.on_ack(8), Step::Ignore);
        assert_eq!(w.on_ack(11), Step::Done);
    }

    #[test]
    fn timeout_resends_from_the_first_unacknowledged_block() {
        let mut w = Window::new(10_000, 512, 8);
        assert_eq!(w.resend(), 1..=8);
        assert_eq!(w.resend(), 1..=8);
        assert_eq!(w.on_ack(3), Step::Send(4..=11));
        assert_eq!(w.resend(), 4..=11);
    }

    #[test]
    fn block_numbers_roll_over_to_zero() {
        let len = 70_000 * 512;
        let mut w = Window::new(len, 512, 16);
        let mut sends = vec![w.resend()];
        let mut wires = Vec::new();
        loop {
            let r = sends.last().unwrap().clone();
            for b in r.clone() {
                wires.push(Window::wire(b));
            }
            match w.on_ack(Window::wire(*r.end())) {
                Step::Done => break,
                Step::Send(next) => sends.push(next),
                Step::Ignore | Step::NotSent => panic!("ignored {r:?}"),
            }
        }
        assert_eq!(wires.len() as u64, 70_001);
        assert_eq!(wires[65534], 65535);
        assert_eq!(wires[65535], 0);
        assert_eq!(wires[65536], 1);
        assert_eq!(*wires.last().unwrap(), (70_001u64 % 65536) as u16);
    }

    #[test]
    fn partial_ack_across_the_rollover() {
        let mut w = Window::new(200_000 * 8, 8, 8);
        // Jump ahead to just before the wrap, lock-step style.
        w.acked = 65530;
        assert_eq!(w.resend(), 65531..=65538);
        // The client got up to absolute 65537 (wire 1).
        assert_eq!(w.on_ack(1), Step::Send(65538..=65545));
        assert_eq!(w.on_ack(65535), Step::Ignore);
        // Past what was sent (65545, wire 9), across the wrap: not sent.
        assert_eq!(w.on_ack(10), Step::NotSent);
        assert_eq!(w.on_ack(9), Step::Send(65546..=65553));
    }
}
