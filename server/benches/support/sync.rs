//! A y-websocket client on `yrs` for the benches that follow documents
//! across connections: connect and complete the handshake, append a
//! paragraph, apply what the server sends, read the paragraphs back. Each
//! connection starts from an empty document of its own unless given one.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use margin_decisions::{Outline, FRAGMENT_NAME};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use yrs::encoding::read::Cursor;
use yrs::sync::{Message, MessageReader, SyncMessage};
use yrs::types::xml::{XmlElementPrelim, XmlTextPrelim};
use yrs::updates::decoder::{Decode, DecoderV1};
use yrs::updates::encoder::Encode;
use yrs::{Doc, GetString, ReadTxn, Text, Transact, Update, XmlFragment, XmlOut};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// One update that writes `count` paragraphs, `text(i)` the `i`th: a
/// document stored whole, for a bench that seeds a store.
pub(crate) fn paragraphs(count: usize, text: impl Fn(usize) -> String) -> Vec<u8> {
    let doc = Doc::new();
    let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    let mut txn = doc.transact_mut();
    for i in 0..count {
        let paragraph = fragment.insert(&mut txn, i as u32, XmlElementPrelim::empty("paragraph"));
        paragraph.insert(&mut txn, 0, XmlTextPrelim::new(text(i)));
    }
    txn.encode_update_v1()
}

/// One sync connection and the document it holds.
pub(crate) struct SyncSocket {
    pub(crate) doc: Doc,
    ws: Ws,
}

impl SyncSocket {
    /// Connects to `url` with a new empty document and waits (at most
    /// `patience`) for the server's sync step 2.
    pub(crate) async fn connect(url: &str, patience: Duration) -> Result<SyncSocket, String> {
        let config = WebSocketConfig::default()
            .max_message_size(None)
            .max_frame_size(None);
        let connecting = tokio_tungstenite::connect_async_with_config(url, Some(config), true);
        let (ws, _) = tokio::time::timeout(patience, connecting)
            .await
            .map_err(|_| "no connection in time".to_owned())?
            .map_err(|e| e.to_string())?;
        let mut socket = SyncSocket {
            doc: Doc::new(),
            ws,
        };
        let sv = socket.doc.transact().state_vector();
        socket
            .send(Message::Sync(SyncMessage::SyncStep1(sv)))
            .await?;
        tokio::time::timeout(patience, async {
            loop {
                match socket.next().await? {
                    Some(true) => return Ok(()),
                    Some(false) => {}
                    None => return Err("closed during the handshake".to_owned()),
                }
            }
        })
        .await
        .map_err(|_| "no sync step 2 in time".to_owned())??;
        Ok(socket)
    }

    async fn send(&mut self, message: Message) -> Result<(), String> {
        self.ws
            .send(WsMessage::Binary(message.encode_v1().into()))
            .await
            .map_err(|e| e.to_string())
    }

    /// Appends a paragraph holding `text` and sends it.
    pub(crate) async fn append(&mut self, text: &str) -> Result<(), String> {
        let fragment = self.doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
        let update = {
            let mut txn = self.doc.transact_mut();
            let at = fragment.len(&txn);
            let paragraph = fragment.insert(&mut txn, at, XmlElementPrelim::empty("paragraph"));
            paragraph.insert(&mut txn, 0, XmlTextPrelim::new(text));
            txn.encode_update_v1()
        };
        self.send(Message::Sync(SyncMessage::Update(update))).await
    }

    /// Types `text` at the end of the last block's text and sends it.
    pub(crate) async fn type_in_last(&mut self, text: &str) -> Result<(), String> {
        let fragment = self.doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
        let update = {
            let mut txn = self.doc.transact_mut();
            let last = fragment
                .len(&txn)
                .checked_sub(1)
                .ok_or("the document has no block")?;
            let Some(XmlOut::Element(block)) = fragment.get(&txn, last) else {
                return Err("the last block is not an element".into());
            };
            let Some(XmlOut::Text(inner)) = block.get(&txn, 0) else {
                return Err("the last block holds no text".into());
            };
            let at = inner.len(&txn);
            inner.insert(&mut txn, at, text);
            txn.encode_update_v1()
        };
        self.send(Message::Sync(SyncMessage::Update(update))).await
    }

    /// The last block's text, empty when there is none.
    pub(crate) fn last_text(&self) -> String {
        let fragment = self.doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
        let txn = self.doc.transact();
        let last = fragment.len(&txn).checked_sub(1);
        match last.and_then(|at| fragment.get(&txn, at)) {
            Some(XmlOut::Element(block)) => block.get_string(&txn),
            _ => String::new(),
        }
    }

    /// Reads one frame and applies it: `Some(true)` when it held a sync
    /// step 2, `Some(false)` for anything else, `None` once the socket
    /// closed.
    pub(crate) async fn next(&mut self) -> Result<Option<bool>, String> {
        loop {
            let data = match self.ws.next().await {
                Some(Ok(WsMessage::Binary(data))) => data,
                Some(Ok(WsMessage::Close(_))) | None | Some(Err(_)) => return Ok(None),
                Some(Ok(_)) => continue,
            };
            let mut decoder = DecoderV1::new(Cursor::new(&data));
            let messages = MessageReader::new(&mut decoder)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let mut step2 = false;
            for message in messages {
                match message {
                    Message::Sync(SyncMessage::SyncStep1(sv)) => {
                        let diff = self.doc.transact().encode_diff_v1(&sv);
                        self.send(Message::Sync(SyncMessage::SyncStep2(diff)))
                            .await?;
                    }
                    Message::Sync(sync @ (SyncMessage::SyncStep2(_) | SyncMessage::Update(_))) => {
                        let update = match sync {
                            SyncMessage::SyncStep2(update) => {
                                step2 = true;
                                update
                            }
                            SyncMessage::Update(update) => update,
                            SyncMessage::SyncStep1(_) => continue,
                        };
                        let update = Update::decode_v1(&update).map_err(|e| e.to_string())?;
                        self.doc
                            .transact_mut()
                            .apply_update(update)
                            .map_err(|e| e.to_string())?;
                    }
                    _ => {}
                }
            }
            return Ok(Some(step2));
        }
    }

    /// The paragraphs' texts, in order.
    pub(crate) fn texts(&self) -> Vec<String> {
        Outline::of_doc(&self.doc)
            .blocks()
            .map(|b| b.text.to_string())
            .collect()
    }

    /// Closes the socket.
    pub(crate) async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }
}

/// An editor that only keeps document `document` loaded on the server at
/// `addr` (a server rebuilds a document nobody has open from storage for
/// every read): it connects, then reads and drops what it is sent.
pub(crate) async fn viewer(
    addr: std::net::SocketAddr,
    document: &str,
    token: &str,
) -> tokio::task::JoinHandle<()> {
    let url = format!("ws://{addr}/documents/{document}/sync?token={token}");
    let (mut sync, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("a sync connection to the document");
    tokio::spawn(async move { while let Some(Ok(_)) = sync.next().await {} })
}
