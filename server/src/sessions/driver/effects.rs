//! Carrying out a committed step's effects in order: frames to the
//! machine (large ones encoded off the async workers), tool calls, stored
//! results, withdrawn questions.

use std::collections::VecDeque;

use margin_planner::{Effect, ReleaseReason, RequestId};
use margin_protocol::link::ServerMessage;
use tracing::{info, warn};

use super::Driver;
use crate::sessions::result_frame::{encoded, is_large, within_frame_limit, Framed};
use crate::sync::cards::CardChange;

impl Driver {
    /// Carries out effects in order; a tool call's own effects go first.
    pub(super) async fn carry_out(&mut self, effects: Vec<Effect>) {
        let mut queue: VecDeque<Effect> = effects.into();
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Send(message) if is_large(&message) => {
                    // Encoding megabytes of outline takes milliseconds of
                    // CPU: off the async workers, which carry every other
                    // session's calls and the links' frames.
                    let frame = tokio::task::spawn_blocking(move || {
                        let framed =
                            encoded(&message).map(|frame| within_frame_limit(&message, frame));
                        (framed, message)
                    });
                    let Ok((framed, message)) = frame.await else {
                        continue;
                    };
                    match framed {
                        Ok(Framed::Fits(frame)) => self.send_frame(frame),
                        Ok(Framed::TooLarge(refused, bytes)) => {
                            warn!(bytes, "a tool result over the frame limit was not sent");
                            self.send(&refused);
                        }
                        Err(error) => warn!(%error, "a tool result could not be encoded"),
                    }
                    // Freeing a large outline's strings takes as long as
                    // encoding them: after the frame is on its way, and off
                    // the async workers.
                    tokio::task::spawn_blocking(move || drop(message));
                }
                Effect::Send(message) => self.send(&message),
                Effect::RunTool { call, tool } => {
                    let more = self.run_tool(call, tool).await;
                    for effect in more.into_iter().rev() {
                        queue.push_front(effect);
                    }
                }
                Effect::Redeliver { call, seq, .. } => self.redeliver(call, seq).await,
                Effect::Withdraw(request) => self.withdraw(&request).await,
                Effect::Released(reason) => self.released(reason),
            }
        }
    }

    /// Sends to the machine: now, after `resumed` while a resume is under
    /// way, or not at all while it is away (the session keeps what it owes).
    pub(super) fn send(&mut self, message: &ServerMessage) {
        if let Ok(frame) = serde_json::to_string(message) {
            self.send_frame(frame);
        }
    }

    pub(super) fn send_frame(&mut self, frame: String) {
        if let Some((_, waiting)) = self.attaching.as_mut() {
            waiting.push(frame);
        } else if let Some(link) = &self.link {
            link.send_frame(frame);
        }
    }

    pub(super) async fn withdraw(&self, request: &RequestId) {
        // A card that no longer holds its question is left as it is.
        let withdrawn = self
            .shared
            .hub
            .change_card(self.session.document(), &request.0, CardChange::Withdraw)
            .await;
        match withdrawn {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => warn!(%error, card = %request, "could not withdraw a question"),
            Err(error) => warn!(%error, card = %request, "could not withdraw a question"),
        }
    }

    pub(super) fn released(&mut self, reason: ReleaseReason) {
        info!(?reason, "Planner session released");
    }
}
