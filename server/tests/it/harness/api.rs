//! HTTP and sync helpers for a Margin server at some address.

use std::net::SocketAddr;

use margin_protocol::DocumentInfo;
use serde_json::json;

/// A client of one server.
pub struct Api {
    pub addr: SocketAddr,
    http: reqwest::Client,
}

impl Api {
    pub fn new(addr: SocketAddr) -> Self {
        Api {
            addr,
            http: reqwest::Client::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn sync_url(&self, document: &str, token: &str) -> String {
        format!("ws://{}/documents/{document}/sync?token={token}", self.addr)
    }

    pub async fn get(&self, token: Option<&str>, path: &str) -> (u16, serde_json::Value) {
        let mut request = self.http.get(self.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        respond(request).await
    }

    pub async fn post(
        &self,
        token: Option<&str>,
        path: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let mut request = self.http.post(self.url(path)).json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        respond(request).await
    }

    pub async fn patch(
        &self,
        token: Option<&str>,
        path: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let mut request = self.http.patch(self.url(path)).json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        respond(request).await
    }

    pub async fn delete(&self, token: Option<&str>, path: &str) -> (u16, serde_json::Value) {
        let mut request = self.http.delete(self.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        respond(request).await
    }

    /// Posts `text` to `document`'s Chat as `token`'s account.
    pub async fn say(&self, token: &str, document: &str, text: &str) {
        let path = format!("/documents/{document}/chat");
        let (status, body) = self.post(Some(token), &path, json!({"text": text})).await;
        assert_eq!(status, 201, "{body}");
    }

    /// Creates a document and returns its id.
    pub async fn create_document(&self, token: &str, title: &str) -> String {
        let (status, body) = self
            .post(Some(token), "/documents", json!({ "title": title }))
            .await;
        assert_eq!(status, 201, "{body}");
        serde_json::from_value::<DocumentInfo>(body).unwrap().id
    }

    /// The texts of the document's blocks, from the outline endpoint.
    pub async fn block_texts(&self, token: &str, document: &str) -> (i64, Vec<String>) {
        let (status, body) = self
            .get(Some(token), &format!("/documents/{document}/outline"))
            .await;
        assert_eq!(status, 200, "{body}");
        let outline: margin_protocol::OutlineView = serde_json::from_value(body).unwrap();
        (
            outline.revision,
            outline.blocks.into_iter().map(|b| b.text).collect(),
        )
    }
}

async fn respond(request: reqwest::RequestBuilder) -> (u16, serde_json::Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(serde_json::Value::Null);
    (status, body)
}
