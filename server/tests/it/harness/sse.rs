//! A Server-Sent Events reader of a session's feed, parsing the stream the
//! way a browser's `EventSource` does (fields, blank-line dispatch,
//! comments ignored).

use std::time::Duration;

use margin_protocol::sessions::SessionEvent;

/// How long a read waits for the next event.
const PATIENCE: Duration = Duration::from_secs(10);

/// One dispatched event.
#[derive(Clone, Debug, PartialEq)]
pub struct SseEvent {
    /// `id:`, absent on `resync`.
    pub id: Option<u64>,
    /// `event:`.
    pub event: String,
    /// `data:`.
    pub data: String,
}

impl SseEvent {
    /// The data as a session event.
    pub fn session_event(&self) -> SessionEvent {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("not a session event ({e}): {}", self.data))
    }
}

/// An open stream.
pub struct Sse {
    response: reqwest::Response,
    buffer: String,
}

impl Sse {
    /// Opens `path` with `Last-Event-ID` when given; the status and, on
    /// 200, the stream.
    pub async fn open(
        addr: std::net::SocketAddr,
        token: &str,
        path: &str,
        last_event_id: Option<&str>,
    ) -> Result<Sse, (u16, serde_json::Value)> {
        let mut request = reqwest::Client::new()
            .get(format!("http://{addr}{path}"))
            .bearer_auth(token)
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        if status != 200 {
            let body = response.json().await.unwrap_or(serde_json::Value::Null);
            return Err((status, body));
        }
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream",
            "an event stream"
        );
        Ok(Sse {
            response,
            buffer: String::new(),
        })
    }

    /// The next event; `None` when the stream ends or is silent too long.
    pub async fn next(&mut self) -> Option<SseEvent> {
        self.within(PATIENCE).await
    }

    /// The next event within `quiet`.
    pub async fn within(&mut self, quiet: Duration) -> Option<SseEvent> {
        loop {
            if let Some(event) = self.dispatch() {
                return Some(event);
            }
            let chunk = tokio::time::timeout(quiet, self.response.chunk())
                .await
                .ok()?
                .ok()??;
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Whether the server ends the stream (with no further event) soon.
    pub async fn ends(&mut self) -> bool {
        if self.dispatch().is_some() {
            return false;
        }
        match tokio::time::timeout(Duration::from_secs(2), self.response.chunk()).await {
            Ok(Ok(None)) => true,
            Ok(Ok(Some(chunk))) => {
                self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
                self.dispatch().is_none() && Box::pin(self.ends()).await
            }
            Ok(Err(_)) | Err(_) => false,
        }
    }

    /// The next `count` events.
    pub async fn take(&mut self, count: usize) -> Vec<SseEvent> {
        let mut events = Vec::with_capacity(count);
        while events.len() < count {
            match self.next().await {
                Some(event) => events.push(event),
                None => panic!("the stream ended after {} of {count} events", events.len()),
            }
        }
        events
    }

    /// Parses one event out of the buffer, if a whole one is there.
    fn dispatch(&mut self) -> Option<SseEvent> {
        loop {
            let end = self.buffer.find("\n\n")?;
            let block: String = self.buffer.drain(..end + 2).collect();
            let (mut id, mut event, mut data) = (None, String::from("message"), Vec::new());
            for line in block.lines() {
                if line.starts_with(':') || line.is_empty() {
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "id" => id = Some(value.parse().unwrap()),
                    "event" => event = value.to_owned(),
                    "data" => data.push(value.to_owned()),
                    _ => {}
                }
            }
            if data.is_empty() {
                continue; // a comment-only block (keep-alive)
            }
            return Some(SseEvent {
                id,
                event,
                data: data.join("\n"),
            });
        }
    }
}
