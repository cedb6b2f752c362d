//! The OS images and the TFTP root over HTTP: whole files and ranges
//! (by `sendfile` or a bounded streaming body), validators, and each
//! kernel, initramfs and rootfs transfer's progress on the node's timeline.

use super::*;

/// Which boot phase a file below the images root is (a set's kernel,
/// initramfs or rootfs), for the timeline.
pub(super) fn image_phase(site: &site::Site, raw: &str) -> Option<Phase> {
    let rel = percent_decode_str(raw).decode_utf8().ok()?;
    let rel = rel.trim_start_matches('/');
    site.images.sets.values().find_map(|s| {
        if s.kernel == rel {
            Some(Phase::Kernel)
        } else if s.initramfs == rel {
            Some(Phase::Initramfs)
        } else if s.rootfs.as_deref() == Some(rel) {
            Some(Phase::Rootfs)
        } else if s.metal.as_ref().is_some_and(|m| m.path == rel) {
            Some(Phase::Install)
        } else {
            None
        }
    })
}

/// A kernel, initramfs or rootfs response in the timeline: `start` when the
/// response begins (over 1 MiB) or once it is still under way after its
/// first piece (smaller ones: most go in one piece, and `done` alone says
/// when they began), `done` (bytes, duration) when its last byte is handed
/// to the connection, `aborted` if the body is dropped before that.
pub(super) struct ImageProgress {
    app: Arc<App>,
    subject: Subject,
    phase: Phase,
    file: String,
    started: std::time::Instant,
    started_us: i64,
    expected: u64,
    sent: std::sync::atomic::AtomicU64,
    started_told: std::sync::atomic::AtomicBool,
    done: std::sync::atomic::AtomicBool,
}

impl ImageProgress {
    /// The `start` event, once, stamped with the response's start.
    fn tell_start(&self) {
        if !self
            .started_told
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            let mut raw = Raw::new(
                self.subject.clone(),
                self.phase,
                "start",
                format!("{}: {} bytes", self.file, self.expected),
            );
            raw.at_us = self.started_us;
            self.app.timeline.record(raw.bytes(self.expected));
        }
    }

    fn add(&self, n: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let total = self.sent.fetch_add(n, Relaxed) + n;
        if total < self.expected {
            self.tell_start();
        } else if !self.done.swap(true, Relaxed) {
            let took = self.started.elapsed();
            let detail = format!("{}: {total} bytes in {} ms", self.file, took.as_millis());
            self.app.timeline.record(
                Raw::new(self.subject.clone(), self.phase, "done", detail)
                    .bytes(total)
                    .took(took),
            );
            if self.phase == Phase::Install {
                if let Some(ip) = self.subject.ip {
                    super::installed_by_image(&self.app, ip);
                }
            }
        }
    }
}

impl Drop for ImageProgress {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::Relaxed;
        if !self.done.load(Relaxed) {
            self.tell_start();
            let (sent, took) = (self.sent.load(Relaxed), self.started.elapsed());
            let detail = format!(
                "{}: aborted after {sent} of {} bytes",
                self.file, self.expected
            );
            self.app.timeline.record(
                Raw::new(self.subject.clone(), self.phase, "aborted", detail)
                    .bytes(sent)
                    .took(took)
                    .error(),
            );
        }
    }
}

/// The content type of every file below the images root.
pub(super) const IMAGE_TYPE: &str = "application/octet-stream";

/// What reports the bytes of an image response: the `images` byte counter
/// and, for a set's kernel, initramfs or rootfs, the node's timeline.
pub(super) fn image_on_bytes(
    app: &Arc<App>,
    track: Option<(Phase, IpAddr)>,
    rel: &str,
    expected: u64,
    pass: Option<Arc<crate::gate::ImagePass>>,
) -> files::OnBytes {
    let bytes = app.metrics.image_bytes.clone();
    let progress = track.map(|(phase, peer)| {
        let p = ImageProgress {
            app: Arc::clone(app),
            subject: Subject::ip(peer.to_canonical()),
            phase,
            file: if rel
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"-._/".contains(&c))
            {
                rel.to_owned()
            } else {
                rel.escape_debug().to_string()
            },
            started: std::time::Instant::now(),
            started_us: crate::timeline::now_us(),
            expected,
            sent: Default::default(),
            started_told: Default::default(),
            done: Default::default(),
        };
        if expected > files::SENDFILE_INLINE_MAX {
            p.tell_start();
        }
        p
    });
    Arc::new(move |n| {
        // The place through the image gate is held while the body is sent.
        let _held = &pass;
        bytes.inc_by(n);
        if let Some(p) = &progress {
            p.add(n);
        }
    })
}

/// The file below the images root that [`image_whole`] may serve for a
/// request path: one of unreserved and sub-delimiter characters only (no
/// query, no percent-encoding), which the general path would read as the
/// same file.
pub fn whole_image_rel(path: &str) -> Option<&str> {
    let rel = path.strip_prefix("/images/")?;
    let plain = |c: u8| c.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@".contains(&c);
    (!rel.is_empty() && rel.bytes().all(plain)).then_some(rel)
}

/// The plain-HTTP loop's shortcut for the request network boot makes most:
/// a GET of a whole file below the images root (no range, no condition,
/// nothing to percent-decode). Appends the status line and the headers [`image`]
/// would give (the same bytes, in the same order: a test compares them)
/// to `head` and returns the file to send, having counted the request as
/// [`handle`] does. `None` when the shortcut does not apply (the path has
/// characters it leaves to the general path, the file is not at hand in
/// the kernel's caches, or is missing or not a regular file): then the
/// request goes through [`handle`], which answers it in full.
pub(crate) fn image_whole(
    app: &Arc<App>,
    path: &str,
    peer: SocketAddr,
    head: &mut Vec<u8>,
) -> Option<files::Sendfile> {
    let rel = whole_image_rel(path)?;
    let snap = app.live.load();
    // No free place through the image gate: the general path waits for one.
    let pass = app
        .admission
        .try_image_pass(&snap.site, peer.ip().to_canonical())?;
    let (file, md) = files::open_beneath_shared(&snap.site.images.root, rel).ok()?;
    let len = md.len();
    let mtime = md.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    let track = image_phase(&snap.site, rel).map(|p| (p, peer.ip()));
    info!(path = %rel.escape_debug(), len, range = false, "file served");
    let on_bytes = image_on_bytes(app, track, rel, len, Some(Arc::new(pass)));
    head.extend_from_slice(b"HTTP/1.1 200 OK\r\netag: ");
    files::write_etag(head, len, mtime);
    head.extend_from_slice(b"\r\nlast-modified: ");
    files::write_http_date(head, mtime);
    head.extend_from_slice(b"\r\naccept-ranges: bytes\r\ncontent-type: ");
    head.extend_from_slice(IMAGE_TYPE.as_bytes());
    head.extend_from_slice(b"\r\ncontent-length: ");
    head.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    head.extend_from_slice(b"\r\n");
    app.metrics
        .requests
        .get_or_create(&RouteStatus {
            route: "images",
            status: 200,
        })
        .inc();
    debug!(method = %Method::GET, path = %path.escape_debug(), %peer, status = 200, route = "images", shortcut = true, "request");
    Some(files::Sendfile {
        file,
        offset: 0,
        len,
        on_bytes: Some(on_bytes),
    })
}

pub(super) async fn image(
    app: &Arc<App>,
    root: &std::path::Path,
    raw: &str,
    headers: &HeaderMap,
    peer: IpAddr,
    track: Option<(Phase, IpAddr)>,
) -> Response<Body> {
    let rel = match percent_decode_str(raw).decode_utf8() {
        Ok(s) => s.into_owned(),
        Err(_) => return not_found(),
    };
    // Fast path: a file whose path is in the kernel's caches is opened right
    // here; anything that would wait for the disk goes to the blocking pool.
    let cached = files::open_beneath_shared(root, &rel);
    let opened = match cached {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            let (root, rel2) = (root.to_path_buf(), rel.clone());
            tokio::task::spawn_blocking(move || {
                files::open_beneath_stat(&root, &rel2).map(|(f, md)| (Arc::new(f), md))
            })
            .await
        }
        r => Ok(r),
    };
    let (file, md) = match opened {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => {
            warn!(path = %rel.escape_debug(), error = %e, "file not served");
            return not_found();
        }
        Err(_) => return not_found(),
    };
    let len = md.len();
    let mtime = md.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    let etag = files::etag(len, mtime);
    let last_modified = files::http_date(mtime);
    let hv = |s: &str| HeaderValue::from_str(s).unwrap_or(HeaderValue::from_static(""));

    let mut base = Response::builder()
        .header(header::ETAG, hv(&etag))
        .header(header::LAST_MODIFIED, hv(&last_modified))
        .header(header::ACCEPT_RANGES, "bytes");
    if let Some(inm) = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
    {
        if inm.split(',').any(|t| t.trim() == etag || t.trim() == "*") {
            return base
                .status(StatusCode::NOT_MODIFIED)
                .body(empty())
                .unwrap_or_else(|_| not_found());
        }
    } else if let Some(ims) = headers
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
    {
        if let Ok(t) = httpdate::parse_http_date(ims) {
            if mtime
                .duration_since(t)
                .map(|d| d.as_secs() == 0)
                .unwrap_or(true)
            {
                return base
                    .status(StatusCode::NOT_MODIFIED)
                    .body(empty())
                    .unwrap_or_else(|_| not_found());
            }
        }
    }
    // If-Range: the range applies only to the representation the client has.
    let if_range_ok = match headers.get(header::IF_RANGE).and_then(|v| v.to_str().ok()) {
        None => true,
        Some(v) if v.starts_with('"') => v == etag,
        Some(v) => v == last_modified,
    };
    let ranges = match headers.get(header::RANGE).and_then(|v| v.to_str().ok()) {
        Some(r) if if_range_ok => files::parse_range(r, len),
        _ => Ranges::Full,
    };
    // Beyond `host.admission.imageTransfers`, the request waits its turn
    // before anything is sent; past the queue or the wait: 503.
    let pass = match app
        .admission
        .image_pass(&app.live.load().site, peer.to_canonical())
        .await
    {
        Ok(p) => Arc::new(p),
        Err(r) => {
            warn!(path = %rel.escape_debug(), %peer, reason = r.reason(), "image request refused: too many image transfers");
            return Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .header(header::RETRY_AFTER, "5")
                .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .body(
                    Full::new(Bytes::from_static(b"too many image transfers; try again\n"))
                        .map_err(|n| match n {})
                        .boxed(),
                )
                .unwrap_or_else(|_| not_found());
        }
    };
    info!(path = %rel.escape_debug(), len, range = headers.contains_key(header::RANGE), "file served");
    let on_bytes = |expected: u64| {
        Some(image_on_bytes(
            app,
            track,
            &rel,
            expected,
            Some(Arc::clone(&pass)),
        ))
    };
    let ctype = IMAGE_TYPE;
    let (status, parts, body_len) = match ranges {
        Ranges::Full => (StatusCode::OK, vec![Part::File { offset: 0, len }], len),
        Ranges::Unsatisfiable => {
            return base
                .status(StatusCode::RANGE_NOT_SATISFIABLE)
                .header(header::CONTENT_RANGE, hv(&format!("bytes */{len}")))
                .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .body(
                    Full::new(Bytes::from_static(b"range not satisfiable\n"))
                        .map_err(|n| match n {})
                        .boxed(),
                )
                .unwrap_or_else(|_| not_found());
        }
        Ranges::Some(rs) if rs.len() == 1 => {
            let (s, e) = rs[0];
            base = base.header(header::CONTENT_RANGE, hv(&format!("bytes {s}-{e}/{len}")));
            (
                StatusCode::PARTIAL_CONTENT,
                vec![Part::File {
                    offset: s,
                    len: e - s + 1,
                }],
                e - s + 1,
            )
        }
        Ranges::Some(rs) => {
            let boundary = format!("bootd{:016x}", rand::random::<u64>());
            let (parts, total) = files::multipart(&rs, len, ctype, &boundary);
            base = base.header(
                header::CONTENT_TYPE,
                hv(&format!("multipart/byteranges; boundary={boundary}")),
            );
            return base
                .status(StatusCode::PARTIAL_CONTENT)
                .header(header::CONTENT_LENGTH, total)
                .body(FileBody::new(file, parts, on_bytes(total)).boxed())
                .unwrap_or_else(|_| not_found());
        }
    };
    let on_bytes = on_bytes(body_len);
    if let [Part::File { offset, len }] = parts[..] {
        base = base.extension(files::Sendfile {
            file: Arc::clone(&file),
            offset,
            len,
            on_bytes: on_bytes.clone(),
        });
    }
    base.status(status)
        .header(header::CONTENT_TYPE, ctype)
        .header(header::CONTENT_LENGTH, body_len)
        .body(FileBody::new(file, parts, on_bytes).boxed())
        .unwrap_or_else(|_| not_found())
}
