//! List and watch for a kind whose objects are large: the Skyhook, whose status holds every
//! node's state (about 1 MiB at a thousand nodes × four packages). kube's watcher reads a watch
//! through a line codec whose buffer grows to the largest event and keeps that size for the life
//! of the watch; for the Skyhook watch that was 2 MiB held for good, the operator's largest
//! single block. Here a body is read into segments ([`Lines`]): a large event costs its own
//! size only while it is decoded, and one segment stays between events. The events are kube's
//! ([`watcher::Event`], [`watcher::Error`]), so [`super::streams::paced`] and the reflector
//! downstream are the same as for every other watch.

use std::pin::Pin;

use futures::{AsyncBufRead, AsyncBufReadExt, Stream};
use kube::api::{ListParams, ObjectList, WatchEvent, WatchParams};
use kube::core::{Request, Status};
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

/// The size of the segments a watch body is read into (most events are far smaller).
const SEGMENT: usize = 64 * 1024;
/// The decoder's read buffer.
const READ_BUFFER: usize = 8 * 1024;
/// The server ends each watch after this long; the next one resumes from the last version.
const WATCH_SECONDS: u32 = 290;

type Body = Pin<Box<dyn AsyncBufRead + Send>>;

enum State<K> {
    /// About to list (says `Init` first, as kube's watcher does).
    Start,
    List,
    Listed {
        version: String,
        items: std::vec::IntoIter<K>,
    },
    /// Between two watch requests.
    Watch {
        version: String,
    },
    Watching {
        version: String,
        lines: Lines,
    },
}

/// Every object of `K` (with `labels`, when given), as kube's watcher reports them: a list
/// (`Init`, `InitApply`…, `InitDone`), then changes, listing again after a 410.
pub fn watch<K>(
    client: Client,
    labels: Option<String>,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Send + 'static,
{
    watch_at(client, K::url_path(&(), None), labels)
}

/// [`watch`] of the objects at `url`: a kind served in another group than `K`'s with the same
/// shape (a NodeWright read as a Skyhook).
pub fn watch_at<K>(
    client: Client,
    url: String,
    labels: Option<String>,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Send + 'static,
{
    futures::stream::unfold(State::Start, move |state| {
        let (client, url, labels) = (client.clone(), url.clone(), labels.clone());
        async move {
            let (event, next) = step(&client, &url, labels.as_deref(), state).await;
            Some((event, next))
        }
    })
}

type Reported<K> = Result<watcher::Event<K>, watcher::Error>;

/// What one state leads to: an event to report with the state after it, or another state to
/// go on from without reporting anything.
enum Next<K> {
    Report(Reported<K>, State<K>),
    Go(State<K>),
}

async fn step<K>(
    client: &Client,
    url: &str,
    labels: Option<&str>,
    mut state: State<K>,
) -> (Reported<K>, State<K>)
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Send + 'static,
{
    loop {
        let next = match state {
            State::Start => Next::Report(Ok(watcher::Event::Init), State::List),
            State::List => match list::<K>(client, url, labels).await {
                Ok(listed) => Next::Go(listed),
                Err(e) => Next::Report(Err(e), State::Start),
            },
            State::Listed { version, mut items } => match items.next() {
                Some(o) => Next::Report(
                    Ok(watcher::Event::InitApply(o)),
                    State::Listed { version, items },
                ),
                None => Next::Report(Ok(watcher::Event::InitDone), State::Watch { version }),
            },
            State::Watch { version } => open(client, url, labels, version).await,
            State::Watching { version, mut lines } => match lines.next::<K>().await {
                // The server ended the watch (its timeout): the next resumes where it was.
                None => Next::Go(State::Watch { version }),
                Some(Err(e)) => Next::Report(
                    Err(watcher::Error::WatchFailed(e)),
                    State::Watch { version },
                ),
                Some(Ok(event)) => received(event, version, lines),
            },
        };
        match next {
            Next::Report(event, after) => return (event, after),
            Next::Go(after) => state = after,
        }
    }
}

/// Opens a watch from `version`; a 410 there means listing again.
async fn open<K>(client: &Client, url: &str, labels: Option<&str>, version: String) -> Next<K> {
    let mut params = WatchParams::default().timeout(WATCH_SECONDS);
    if let Some(l) = labels {
        params = params.labels(l);
    }
    let opened = match Request::new(url).watch(&params, &version) {
        Ok(req) => client.request_stream(req).await,
        Err(e) => Err(kube::Error::BuildRequest(e)),
    };
    match opened {
        Ok(body) => Next::Go(State::Watching {
            version,
            lines: Lines::new(Box::pin(body)),
        }),
        Err(e) => {
            let gone = matches!(&e, kube::Error::Api(s) if s.code == 410);
            let after = if gone {
                State::Start
            } else {
                State::Watch { version }
            };
            Next::Report(Err(watcher::Error::WatchStartFailed(e)), after)
        }
    }
}

/// One event of an open watch.
fn received<K: Resource>(event: WatchEvent<K>, version: String, lines: Lines) -> Next<K> {
    match event {
        WatchEvent::Added(o) | WatchEvent::Modified(o) => {
            let version = o.meta().resource_version.clone().unwrap_or(version);
            Next::Report(
                Ok(watcher::Event::Apply(o)),
                State::Watching { version, lines },
            )
        }
        WatchEvent::Deleted(o) => {
            let version = o.meta().resource_version.clone().unwrap_or(version);
            Next::Report(
                Ok(watcher::Event::Delete(o)),
                State::Watching { version, lines },
            )
        }
        WatchEvent::Bookmark(b) => Next::Go(State::Watching {
            version: b.metadata.resource_version,
            lines,
        }),
        WatchEvent::Error(status) => {
            let after = if status.code == 410 {
                State::Start
            } else {
                State::Watching { version, lines }
            };
            Next::Report(Err(watcher::Error::WatchError(status)), after)
        }
    }
}

/// The list, decoded while it is read ([`crate::streamed`]).
async fn list<K>(
    client: &Client,
    url: &str,
    labels: Option<&str>,
) -> Result<State<K>, watcher::Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Send + 'static,
{
    let mut params = ListParams::default().match_any();
    if let Some(l) = labels {
        params = params.labels(l);
    }
    let req = Request::new(url)
        .list(&params)
        .map_err(|e| watcher::Error::InitialListFailed(kube::Error::BuildRequest(e)))?;
    let listed: ObjectList<K> = crate::streamed::request(client, req)
        .await
        .map_err(watcher::Error::InitialListFailed)?;
    let version = listed
        .metadata
        .resource_version
        .filter(|v| !v.is_empty())
        .ok_or(watcher::Error::NoResourceVersion)?;
    Ok(State::Listed {
        version,
        items: listed.items.into_iter(),
    })
}

/// A watch body, one JSON event per line, read into segments of [`SEGMENT`] bytes: a large
/// event costs its own size while it is decoded (a contiguous buffer grows past it by doubling,
/// then copies), and at most one segment stays between events.
struct Lines {
    body: Body,
    /// Bytes read and not yet decoded, in order; new bytes go to the last segment's room.
    segments: Vec<Vec<u8>>,
    /// How many of the first bytes are known to hold no newline.
    scanned: usize,
}

impl Lines {
    fn new(body: Body) -> Self {
        Lines {
            body,
            segments: Vec::new(),
            scanned: 0,
        }
    }

    /// The next event; `None` at the end of the body.
    async fn next<K: DeserializeOwned>(&mut self) -> Option<Result<WatchEvent<K>, kube::Error>> {
        loop {
            if let Some(end) = self.newline() {
                let event = decode(|| Rope::new(&self.segments, end));
                self.consume(end + 1);
                match event {
                    None => continue,
                    Some(event) => return Some(event),
                }
            }
            let chunk = match self.body.fill_buf().await {
                Ok(chunk) => chunk,
                Err(e) => return Some(Err(kube::Error::ReadEvents(e))),
            };
            if chunk.is_empty() {
                // A line cut short by the end of the body is dropped, as kube's codec does.
                return None;
            }
            let n = chunk.len();
            push(&mut self.segments, chunk);
            self.body.consume_unpin(n);
        }
    }

    /// Where the first newline is, searching only bytes not searched before.
    fn newline(&mut self) -> Option<usize> {
        let mut offset = 0;
        for seg in &self.segments {
            let from = self.scanned.saturating_sub(offset).min(seg.len());
            if let Some(at) = seg[from..].iter().position(|b| *b == b'\n') {
                return Some(offset + from + at);
            }
            offset += seg.len();
        }
        self.scanned = offset;
        None
    }

    /// Drops the first `n` bytes.
    fn consume(&mut self, mut n: usize) {
        while n > 0 && !self.segments.is_empty() {
            if self.segments[0].len() <= n {
                n -= self.segments.remove(0).len();
            } else {
                self.segments[0].drain(..n);
                n = 0;
            }
        }
        self.scanned = 0;
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.segments.iter().map(Vec::capacity).sum()
    }
}

/// Appends `data`, filling the last segment before starting another.
fn push(segments: &mut Vec<Vec<u8>>, mut data: &[u8]) {
    while !data.is_empty() {
        match segments.last_mut() {
            Some(last) if last.len() < last.capacity() => {
                let n = (last.capacity() - last.len()).min(data.len());
                last.extend_from_slice(&data[..n]);
                data = &data[n..];
            }
            _ => segments.push(Vec::with_capacity(SEGMENT)),
        }
    }
}

/// The first `len` bytes of the segments, as one `Read`.
struct Rope<'a> {
    parts: Vec<&'a [u8]>,
}

impl<'a> Rope<'a> {
    fn new(segments: &'a [Vec<u8>], mut len: usize) -> Self {
        let mut parts = Vec::new();
        for seg in segments {
            if len == 0 {
                break;
            }
            let n = seg.len().min(len);
            parts.push(&seg[..n]);
            len -= n;
        }
        parts.reverse();
        Rope { parts }
    }
}

impl std::io::Read for Rope<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while let Some(part) = self.parts.last_mut() {
            if part.is_empty() {
                self.parts.pop();
                continue;
            }
            return part.read(buf);
        }
        Ok(0)
    }
}

/// One line of a watch: an event, an API error in its place, or nothing (a blank line).
fn decode<'a, K: DeserializeOwned>(
    line: impl Fn() -> Rope<'a>,
) -> Option<Result<WatchEvent<K>, kube::Error>> {
    if line()
        .parts
        .iter()
        .all(|p| p.iter().all(u8::is_ascii_whitespace))
    {
        return None;
    }
    let read = || std::io::BufReader::with_capacity(READ_BUFFER, line());
    Some(match serde_json::from_reader::<_, WatchEvent<K>>(read()) {
        Ok(event) => Ok(event),
        Err(e) => match serde_json::from_reader::<_, Status>(read()) {
            Ok(status) => Err(kube::Error::Api(Box::new(status))),
            Err(_) => Err(kube::Error::SerdeError(e)),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn body(pieces: Vec<Vec<u8>>) -> Body {
        let chunks = futures::stream::iter(pieces.into_iter().map(Ok::<_, std::io::Error>));
        Box::pin(futures::TryStreamExt::into_async_read(chunks))
    }

    fn event(kind: &str, name: &str, rv: &str, filler: usize) -> Vec<u8> {
        let mut line = serde_json::to_vec(&serde_json::json!({
            "type": kind,
            "object": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "resourceVersion": rv},
                "data": {"x": "y".repeat(filler)}},
        }))
        .unwrap();
        line.push(b'\n');
        line
    }

    fn name(e: &WatchEvent<ConfigMap>) -> String {
        match e {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                o.metadata.name.clone().unwrap()
            }
            WatchEvent::Bookmark(b) => format!("bookmark {}", b.metadata.resource_version),
            WatchEvent::Error(s) => format!("error {}", s.code),
        }
    }

    /// Events split anywhere across chunks arrive whole and in order; the segments hold what is
    /// still to be read and at most one segment more, so a large event is given back once read.
    #[tokio::test]
    async fn events_split_anywhere_arrive_whole_and_a_large_one_is_given_back() {
        let mut all = Vec::new();
        all.extend(event("ADDED", "a", "1", 10));
        all.extend(event("MODIFIED", "big", "2", 3 * SEGMENT));
        all.extend(b"\n".to_vec());
        all.extend(
            br#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"3"}}}"#
                .to_vec(),
        );
        all.extend(b"\n".to_vec());
        all.extend(event("DELETED", "a", "4", 10));
        all.extend(br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired"}}"#.to_vec());
        all.extend(b"\n{\"type\":\"ADDED\",\"object\":{\"metadata\"".to_vec());
        for size in [1, 7, 1000, SEGMENT + 3, all.len()] {
            let mut lines = Lines::new(body(all.chunks(size).map(<[u8]>::to_vec).collect()));
            let mut got = Vec::new();
            while let Some(e) = lines.next::<ConfigMap>().await {
                got.push(name(&e.unwrap()));
                let unread: usize = lines.segments.iter().map(Vec::len).sum();
                assert!(
                    lines.held() <= unread.next_multiple_of(SEGMENT) + SEGMENT,
                    "chunks of {size}: {} held for {unread} unread",
                    lines.held()
                );
            }
            assert_eq!(
                got,
                ["a", "big", "bookmark 3", "a", "error 410"],
                "chunks of {size}"
            );
            assert!(lines.held() <= SEGMENT, "chunks of {size}");
        }
    }

    #[test]
    fn a_rope_reads_across_segments_up_to_its_length() {
        let segments = vec![b"ab".to_vec(), Vec::new(), b"cde".to_vec(), b"fg".to_vec()];
        for len in 0..=7 {
            let mut out = String::new();
            std::io::Read::read_to_string(&mut Rope::new(&segments, len), &mut out).unwrap();
            assert_eq!(out, "abcdefg"[..len], "len {len}");
        }
    }

    #[tokio::test]
    async fn a_line_that_is_no_event_is_an_error_and_the_watch_goes_on() {
        let mut all = b"{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"code\":500,\"message\":\"boom\"}\nnot json\n".to_vec();
        all.extend(event("ADDED", "a", "1", 1));
        let mut lines = Lines::new(body(vec![all]));
        match lines.next::<ConfigMap>().await {
            Some(Err(kube::Error::Api(s))) => assert_eq!(s.code, 500),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            lines.next::<ConfigMap>().await,
            Some(Err(kube::Error::SerdeError(_)))
        ));
        assert_eq!(
            name(&lines.next::<ConfigMap>().await.unwrap().unwrap()),
            "a"
        );
        assert!(lines.next::<ConfigMap>().await.is_none());
    }
}
