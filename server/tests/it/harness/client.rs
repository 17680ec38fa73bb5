//! A y-websocket client built on `yrs`, the way a second implementation
//! would talk to Margin.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use margin_decisions::{Outline, FRAGMENT_NAME};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{connect_async_with_config, MaybeTlsStream, WebSocketStream};
use yrs::encoding::read::Cursor;
use yrs::sync::{Message, MessageReader, SyncMessage};
use yrs::types::xml::{XmlElementPrelim, XmlTextPrelim};
use yrs::updates::decoder::{Decode, DecoderV1};
use yrs::updates::encoder::Encode;
use yrs::{Doc, ReadTxn, StateVector, Transact, Update, XmlFragment, XmlOut};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long a test waits for something that should happen promptly.
pub const PATIENCE: Duration = Duration::from_secs(20);

pub struct SyncClient {
    pub doc: Doc,
    /// Awareness states received: client id → JSON (`null` when removed).
    pub awareness: std::collections::BTreeMap<u64, String>,
    ws: Ws,
    /// Set when the server closed the connection: (code, reason).
    pub closed: Option<(u16, String)>,
}

impl SyncClient {
    /// Connects and completes the sync handshake.
    pub async fn connect(url: &str) -> SyncClient {
        let mut client = Self::connect_raw(url).await;
        client.handshake().await;
        client
    }

    /// Connects without syncing.
    pub async fn connect_raw(url: &str) -> SyncClient {
        // A whole document can exceed tungstenite's default 16 MiB frame.
        let config = WebSocketConfig::default()
            .max_message_size(None)
            .max_frame_size(None);
        let (ws, _) = connect_async_with_config(url, Some(config), false)
            .await
            .unwrap();
        SyncClient {
            doc: Doc::new(),
            awareness: Default::default(),
            ws,
            closed: None,
        }
    }

    /// Sends step 1 and waits for the server's step 2.
    pub async fn handshake(&mut self) {
        let sv = self.doc.transact().state_vector();
        self.send(Message::Sync(SyncMessage::SyncStep1(sv))).await;
        let mut synced = false;
        tokio::time::timeout(PATIENCE, async {
            while !synced {
                let Some(messages) = self.next_messages().await else {
                    panic!("closed during handshake: {:?}", self.closed);
                };
                for message in messages {
                    if matches!(message, Message::Sync(SyncMessage::SyncStep2(_))) {
                        synced = true;
                    }
                    self.handle(message).await;
                }
            }
        })
        .await
        .expect("no sync step 2 within the time allowed");
    }

    pub async fn send(&mut self, message: Message) {
        self.send_raw(message.encode_v1()).await;
    }

    pub async fn send_raw(&mut self, bytes: Vec<u8>) {
        let _ = self.ws.send(WsMessage::Binary(bytes.into())).await;
    }

    pub async fn send_text(&mut self, text: &str) {
        let _ = self.ws.send(WsMessage::Text(text.into())).await;
    }

    /// Appends a paragraph locally and sends the update.
    pub async fn append_paragraph(&mut self, text: &str) {
        let update = self.local_paragraph(text);
        self.send(Message::Sync(SyncMessage::Update(update))).await;
    }

    /// Appends a paragraph locally; returns the update without sending it.
    pub fn local_paragraph(&mut self, text: &str) -> Vec<u8> {
        let at = self.block_count();
        self.local_insert(at, text)
    }

    fn local_insert(&mut self, index: usize, text: &str) -> Vec<u8> {
        let fragment = self.doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
        let before = self.doc.transact().state_vector();
        {
            let mut txn = self.doc.transact_mut();
            let paragraph =
                fragment.insert(&mut txn, index as u32, XmlElementPrelim::empty("paragraph"));
            paragraph.insert(&mut txn, 0, XmlTextPrelim::new(text));
        }
        self.doc.transact().encode_diff_v1(&before)
    }

    /// Inserts a paragraph at `index` and sends the update, as a person
    /// typing would.
    pub async fn insert_paragraph(&mut self, index: usize, text: &str) {
        let update = self.local_insert(index, text);
        self.send(Message::Sync(SyncMessage::Update(update))).await;
    }

    /// Replaces the text of the block at `index` (the block stays) and sends
    /// the update.
    pub async fn rewrite(&mut self, index: usize, text: &str) {
        let fragment = self.doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
        let before = self.doc.transact().state_vector();
        {
            let mut txn = self.doc.transact_mut();
            let Some(XmlOut::Element(block)) = fragment.get(&txn, index as u32) else {
                panic!("no block at {index}");
            };
            let len = block.len(&txn);
            block.remove_range(&mut txn, 0, len);
            block.insert(&mut txn, 0, XmlTextPrelim::new(text));
        }
        let update = self.doc.transact().encode_diff_v1(&before);
        self.send(Message::Sync(SyncMessage::Update(update))).await;
    }

    /// Deletes the block at `index` and sends the update.
    pub async fn delete(&mut self, index: usize) {
        let fragment = self.doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
        let before = self.doc.transact().state_vector();
        fragment.remove_range(&mut self.doc.transact_mut(), index as u32, 1);
        let update = self.doc.transact().encode_diff_v1(&before);
        self.send(Message::Sync(SyncMessage::Update(update))).await;
    }

    /// Removes card `id` from the decisions mirror and sends the update, as
    /// a client rewriting the map would.
    pub async fn forget_card(&mut self, id: &str) {
        use yrs::Map;
        let map = self
            .doc
            .get_or_insert_map(margin_server::sync::writes::DECISIONS_MAP);
        let before = self.doc.transact().state_vector();
        map.remove(&mut self.doc.transact_mut(), id);
        let update = self.doc.transact().encode_diff_v1(&before);
        self.send(Message::Sync(SyncMessage::Update(update))).await;
    }

    /// The decision cards mirrored into the document: (id, JSON).
    pub fn projected_cards(&self) -> Vec<(String, String)> {
        margin_server::sync::writes::projected(&self.doc)
    }

    /// How many blocks the document has (cheap: no text is read).
    pub fn block_count(&self) -> usize {
        let fragment = self.doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
        fragment.len(&self.doc.transact()) as usize
    }

    pub fn texts(&self) -> Vec<String> {
        Outline::of_doc(&self.doc)
            .blocks()
            .map(|b| b.text.to_string())
            .collect()
    }

    /// Processes incoming messages until `done` holds or the socket closes.
    pub async fn until(&mut self, mut done: impl FnMut(&SyncClient) -> bool) -> bool {
        let result = tokio::time::timeout(PATIENCE, async {
            while !done(self) {
                match self.next_messages().await {
                    Some(messages) => {
                        for message in messages {
                            self.handle(message).await;
                        }
                    }
                    None => return done(self),
                }
            }
            true
        })
        .await;
        result.unwrap_or(false)
    }

    /// Waits for the server to close the socket; returns (code, reason).
    pub async fn wait_closed(&mut self) -> (u16, String) {
        self.until(|c| c.closed.is_some()).await;
        self.closed
            .clone()
            .expect("server did not close the connection")
    }

    /// Reads for `quiet` and returns whether the socket stayed open.
    pub async fn stays_open(&mut self, quiet: Duration) -> bool {
        let _ = tokio::time::timeout(quiet, async {
            while let Some(messages) = self.next_messages().await {
                for message in messages {
                    self.handle(message).await;
                }
            }
        })
        .await;
        self.closed.is_none()
    }

    async fn next_messages(&mut self) -> Option<Vec<Message>> {
        loop {
            match self.ws.next().await {
                Some(Ok(WsMessage::Binary(data))) => {
                    let mut decoder = DecoderV1::new(Cursor::new(&data));
                    let messages = MessageReader::new(&mut decoder)
                        .collect::<Result<Vec<_>, _>>()
                        .expect("server sent a malformed message");
                    return Some(messages);
                }
                Some(Ok(WsMessage::Close(frame))) => {
                    self.closed = Some(match frame {
                        Some(f) => (u16::from(f.code), f.reason.to_string()),
                        None => (u16::from(CloseCode::Status), String::new()),
                    });
                    return None;
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => {
                    if self.closed.is_none() {
                        self.closed = Some((u16::from(CloseCode::Abnormal), String::new()));
                    }
                    return None;
                }
            }
        }
    }

    async fn handle(&mut self, message: Message) {
        match message {
            Message::Sync(SyncMessage::SyncStep1(sv)) => {
                let diff = self.doc.transact().encode_diff_v1(&sv);
                self.send(Message::Sync(SyncMessage::SyncStep2(diff))).await;
            }
            Message::Sync(SyncMessage::SyncStep2(update) | SyncMessage::Update(update)) => {
                let update = Update::decode_v1(&update).unwrap();
                self.doc.transact_mut().apply_update(update).unwrap();
            }
            Message::Awareness(update) => {
                for (client, entry) in update.clients {
                    self.awareness.insert(client.get(), entry.json.to_string());
                }
            }
            _ => {}
        }
    }

    /// Announces awareness `json` for `client` (as a y-websocket client does).
    pub async fn announce(&mut self, client: u64, clock: u32, json: &str) {
        use yrs::sync::awareness::{AwarenessUpdate, AwarenessUpdateEntry};
        let mut clients = std::collections::HashMap::new();
        clients.insert(
            yrs::block::ClientID::new(client),
            AwarenessUpdateEntry {
                clock,
                json: json.into(),
            },
        );
        self.send(Message::Awareness(AwarenessUpdate { clients }))
            .await;
    }

    pub fn state_vector(&self) -> StateVector {
        self.doc.transact().state_vector()
    }

    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }
}
