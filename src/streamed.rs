//! JSON answers decoded while they arrive. kube's `Client::request` collects the whole body
//! (hyper's read buffers, one contiguous copy, then a `String`) before parsing it: a page of
//! 500 nodes' metadata held about 6 MiB at once, a third of the plugin's `node status` peak at
//! a thousand nodes, and the operator's status replace answer (the Skyhook with every node's
//! state) about four times its own size. Here the body's chunks go to a blocking thread that
//! parses them as they come, so only a few chunks and the parsed result are ever in memory.

use std::io::Read;

use futures::{AsyncBufRead, AsyncBufReadExt};
use kube::Client;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

/// Chunks in flight between the body and the parser: enough to keep both busy.
const CHUNKS_IN_FLIGHT: usize = 4;

/// Sends `request` and decodes its JSON answer as `T` while it is read.
pub async fn request<T>(client: &Client, request: http::Request<Vec<u8>>) -> Result<T, kube::Error>
where
    T: DeserializeOwned + Send + 'static,
{
    let body = client.request_stream(request).await?;
    let (tx, rx) = mpsc::channel::<Vec<u8>>(CHUNKS_IN_FLIGHT);
    let parser = tokio::task::spawn_blocking(move || {
        let reader = std::io::BufReader::new(Chunks {
            rx,
            chunk: Vec::new(),
            at: 0,
        });
        serde_json::from_reader::<_, T>(reader)
    });
    let mut body = std::pin::pin!(body);
    let read = async {
        loop {
            let chunk = body.fill_buf().await?;
            if chunk.is_empty() {
                return Ok::<(), std::io::Error>(());
            }
            let (chunk, len) = (chunk.to_vec(), chunk.len());
            body.as_mut().consume(len);
            // The parser stopped early (bad JSON): its error says why, below.
            if tx.send(chunk).await.is_err() {
                return Ok(());
            }
        }
    };
    let read = read.await;
    drop(tx);
    let parsed = parser
        .await
        .map_err(|e| kube::Error::Service(Box::new(e)))?;
    match (read, parsed) {
        (Err(e), _) => Err(kube::Error::ReadEvents(e)),
        (Ok(()), parsed) => parsed.map_err(kube::Error::SerdeError),
    }
}

/// The body's chunks as a `Read`, on the parser's thread.
struct Chunks {
    rx: mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.rx.blocking_recv() {
                Some(next) => (self.chunk, self.at) = (next, 0),
                None => return Ok(0),
            }
        }
        let n = (&self.chunk[self.at..]).read(buf)?;
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever the chunk boundaries (mid-string, mid-escape, mid-number), the parser reads
    /// the same document.
    #[test]
    fn chunks_split_anywhere_parse_as_the_whole() {
        let doc = br#"{"items":[{"name":"n\u00e9-1","n":12345},{"name":"b\"q","n":-7}],"x":null}"#;
        let whole: serde_json::Value = serde_json::from_slice(doc).unwrap();
        for size in [1, 2, 3, 7, doc.len()] {
            let (tx, rx) = mpsc::channel(doc.len() + 1);
            for piece in doc.chunks(size) {
                tx.try_send(piece.to_vec()).unwrap();
            }
            tx.try_send(Vec::new()).unwrap();
            drop(tx);
            let reader = Chunks {
                rx,
                chunk: Vec::new(),
                at: 0,
            };
            let parsed: serde_json::Value = serde_json::from_reader(reader).unwrap();
            assert_eq!(parsed, whole, "chunks of {size}");
        }
    }

    #[test]
    fn a_body_cut_short_is_an_error() {
        let (tx, rx) = mpsc::channel(1);
        tx.try_send(br#"{"items":[{"name":"#.to_vec()).unwrap();
        drop(tx);
        let reader = Chunks {
            rx,
            chunk: Vec::new(),
            at: 0,
        };
        let err = serde_json::from_reader::<_, serde_json::Value>(reader).unwrap_err();
        assert!(err.is_eof(), "{err}");
    }
}
