//! Decision capture end to end: the Planner tools on a live document, cards
//! stored on SQLite and PostgreSQL, people's actions over HTTP, and the live
//! mirror editors see (SPEC S5, D1–D10).

use std::time::Duration;

use margin_protocol::decisions::{
    CaptureStatus, CardInput, DecisionCardView, EditInput, EditPlanInput, OpenDecisionInput,
    OpenDecisionsInput, OpenDecisionsOutput, PassageAddress, ReadDocumentOutput,
};
use margin_protocol::tools::ToolCall;
use margin_server::storage::Account;
use margin_server::tools::{ToolError, Tools};
use serde_json::json;

use crate::harness::{InProcess, SyncClient};
use crate::on_both_backends;

/// A document with `texts` typed by a person through sync, and a Planner
/// acting for the owner.
struct Scene {
    server: InProcess,
    owner: Account,
    token: String,
    doc: String,
    person: SyncClient,
}

impl Scene {
    async fn new(db: &crate::harness::TestDb, texts: &[&str]) -> Scene {
        let server = InProcess::start(db).await;
        let (owner, token) = server.account("ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut person = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        for text in texts {
            person.append_paragraph(text).await;
        }
        let scene = Scene {
            server,
            owner,
            token,
            doc,
            person,
        };
        scene.settle(texts.len() as i64).await;
        scene
    }

    fn tools(&self) -> Tools {
        self.server.tools()
    }

    /// Waits until the document's revision reaches `revision`.
    async fn settle(&self, revision: i64) {
        for _ in 0..400 {
            if self.server.block_texts(&self.token, &self.doc).await.0 >= revision {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("revision {revision} never arrived");
    }

    /// Waits for the person's last change to be committed.
    async fn person_change(&self, before: i64) {
        self.settle(before + 1).await;
    }

    async fn revision(&self) -> i64 {
        self.server.block_texts(&self.token, &self.doc).await.0
    }

    /// A person types a paragraph at `index`; returns once it is committed.
    async fn person_inserts(&mut self, index: usize, text: &str) {
        let before = self.server.block_texts(&self.token, &self.doc).await.0;
        self.person.insert_paragraph(index, text).await;
        self.settle(before + 1).await;
    }

    async fn read(&self) -> ReadDocumentOutput {
        self.tools()
            .read_document(&self.owner, &self.doc)
            .await
            .unwrap()
            .decode()
            .unwrap()
    }

    async fn open(
        &self,
        revision: i64,
        cards: Vec<CardInput>,
    ) -> Result<OpenDecisionsOutput, ToolError> {
        self.tools()
            .open_decisions(
                &self.owner,
                &self.doc,
                OpenDecisionsInput { revision, cards },
                None,
            )
            .await
    }

    async fn cards(&self) -> Vec<DecisionCardView> {
        let (status, body) = self
            .server
            .get(
                Some(&self.token),
                &format!("/documents/{}/decisions", self.doc),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_value(body["decisions"].clone()).unwrap()
    }

    async fn act(
        &self,
        token: &str,
        card: &str,
        action: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        self.server
            .post(
                Some(token),
                &format!("/documents/{}/decisions/{card}/{action}", self.doc),
                body,
            )
            .await
    }
}

fn address(read: &ReadDocumentOutput, index: usize) -> PassageAddress {
    PassageAddress {
        index,
        digest: read.outline[index].digest.clone(),
    }
}

fn card(key: &str, passages: Vec<PassageAddress>) -> CardInput {
    CardInput {
        key: key.into(),
        question: "Which region launches first?".into(),
        description: None,
        response: "single_choice".into(),
        choices: vec!["EU".into(), "US".into()],
        passages,
    }
}

fn refusal_code(result: &Result<OpenDecisionsOutput, ToolError>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(ToolError::Refused(r)) => r.code.to_string(),
        Err(other) => format!("internal: {other}"),
    }
}

const PLAN: [&str; 3] = ["Intro", "Pick a region", "Budget"];

on_both_backends! {
    async fn stale_batch_lands_beside_the_right_paragraph_and_editors_see_it_live(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        s.person_inserts(0, "A person typed this first").await;
        let output = s.open(read.revision, vec![card("region", vec![address(&read, 1)])]).await.unwrap();
        assert_eq!(output.captures[0].status, CaptureStatus::Created);
        assert_eq!(output.summary, "added 1 decision");
        let cards = s.cards().await;
        assert_eq!(cards.len(), 1);
        // Anchored to the block read, which now stands at index 2.
        let (_, outline) = (s.read().await.revision, s.read().await.outline);
        assert_eq!(cards[0].anchors, vec![outline[2].identity.clone()]);
        assert!(s.person.until(|c| c.projected_cards().len() == 1).await);
        let mirrored: DecisionCardView = serde_json::from_str(&s.person.projected_cards()[0].1).unwrap();
        assert_eq!(mirrored, cards[0]);
    }

    async fn the_revision_a_batch_returns_is_remembered_as_read(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let first = s.open(read.revision, vec![card("region", vec![address(&read, 1)])]).await.unwrap();
        // Mirroring the new card made a revision; the outline is unchanged.
        assert_eq!(first.revision, read.revision + 1);
        s.person_inserts(0, "someone typed").await;
        let next = s.open(first.revision, vec![card("budget", vec![address(&read, 2)])]).await.unwrap();
        assert_eq!(next.captures[0].status, CaptureStatus::Created);
        assert_eq!(s.cards().await.len(), 2);
    }

    async fn twin_typed_ahead_refuses_the_batch_and_stores_nothing(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        s.person_inserts(0, "Pick a region").await;
        let result = s.open(read.revision, vec![card("region", vec![address(&read, 1)])]).await;
        assert_eq!(refusal_code(&result), "twin_now");
        let Err(ToolError::Refused(refusal)) = result else { unreachable!() };
        assert!(refusal.read_again && refusal.message.contains("\"region\""), "{refusal:?}");
        assert!(s.cards().await.is_empty());
    }

    async fn read_is_lost_in_a_restart_but_an_identical_replay_beside_its_paragraph_stays_idempotent(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let region = card("region", vec![address(&read, 1)]);
        s.open(read.revision, vec![region.clone()]).await.unwrap();
        let budget = card("budget", vec![address(&read, 2)]);
        s.server.restart().await;
        s.person = SyncClient::connect(&s.server.sync_url(&s.doc, &s.token)).await;
        s.person_inserts(0, "typed after the restart").await;
        // A new card at the lost read: refused.
        assert_eq!(refusal_code(&s.open(read.revision, vec![budget]).await), "read_evicted");
        // The identical replay of a card beside its paragraph: accepted.
        let replay = s.open(read.revision, vec![region]).await.unwrap();
        assert_eq!(replay.captures[0].status, CaptureStatus::AlreadyInDocument);
        assert_eq!(replay.summary, "1 decision already in the document");
        assert_eq!(s.cards().await.len(), 1);
    }

    async fn batch_from_an_edit_plan_revision_survives_another_writers_edit(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let edited = s.tools().edit_plan(&s.owner, &s.doc, EditPlanInput {
            revision: read.revision,
            edits: vec![EditInput::Insert { after: Some(address(&read, 2)), kind: "paragraph".into(), level: None, text: "Risks".into() }],
        }, "ada", None).await.unwrap();
        assert_eq!(edited.revision, read.revision + 1);
        assert_eq!(&*edited.outline[3].text, "Risks");
        assert!(s.person.until(|c| c.texts().len() == 4).await);
        s.person_inserts(0, "someone else").await;
        let risks = PassageAddress { index: 3, digest: edited.outline[3].digest.clone() };
        let output = s.open(edited.revision, vec![card("risks", vec![risks])]).await.unwrap();
        assert_eq!(output.captured, 1);
    }

    async fn a_read_of_a_revision_already_read_is_the_kept_read_and_a_new_revision_is_read_anew(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let tools = s.tools();
        let first = tools.read_document(&s.owner, &s.doc).await.unwrap();
        let again = tools.read_document(&s.owner, &s.doc).await.unwrap();
        // The same revision: the read written once, shared.
        assert!(std::ptr::eq(first.json(), again.json()));
        s.person_inserts(0, "typed").await;
        let after = tools.read_document(&s.owner, &s.doc).await.unwrap().decode().unwrap();
        assert_eq!(after.revision, first.decode().unwrap().revision + 1);
        assert_eq!(&*after.outline[0].text, "typed");
        assert_eq!(after.outline.len(), PLAN.len() + 1);
        // Written from the first read: the blocks it had are the same
        // blocks, one place further on.
        for (was, now) in first.decode().unwrap().outline.iter().zip(&after.outline[1..]) {
            assert_eq!((was.index + 1, &was.text, &was.digest, &was.identity),
                       (now.index, &now.text, &now.digest, &now.identity));
        }
    }

    async fn edit_plan_at_a_stale_revision_changes_nothing(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        s.person_inserts(0, "typed").await;
        let result = s.tools().edit_plan(&s.owner, &s.doc, EditPlanInput {
            revision: read.revision,
            edits: vec![EditInput::Delete { at: address(&read, 0) }],
        }, "ada", None).await;
        match result {
            Err(ToolError::Refused(r)) => assert_eq!(r.code, "stale_revision"),
            other => panic!("expected stale_revision, got {other:?}"),
        }
        assert_eq!(s.server.block_texts(&s.token, &s.doc).await.1.len(), 4);
    }

    async fn open_decision_and_ask_at_a_stale_revision_refuse(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        s.person_inserts(0, "typed").await;
        let input = OpenDecisionInput { revision: read.revision, card: card("region", vec![address(&read, 1)]) };
        let tools = s.tools();
        assert_eq!(refusal_code(&tools.open_decision(&s.owner, &s.doc, input.clone(), None).await), "stale_revision");
        let asked = tools.call(&s.owner, &s.doc, ToolCall::Ask(input), "ada", None).await;
        let asked = asked.result.map(|output| output.decode::<OpenDecisionsOutput>().unwrap());
        assert_eq!(refusal_code(&asked), "stale_revision");
        assert!(s.cards().await.is_empty());
    }

    async fn a_viewer_or_stranger_planner_gets_no_access(db) {
        let s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let (viewer, _) = s.server.account("vic").await;
        s.server.store().set_member(&s.doc, &viewer, margin_protocol::Role::Viewer).await.unwrap();
        let (stranger, _) = s.server.account("sam").await;
        for account in [&viewer, &stranger] {
            let result = s.tools().open_decisions(account, &s.doc, OpenDecisionsInput {
                revision: read.revision,
                cards: vec![card("region", vec![address(&read, 1)])],
            }, None).await;
            assert_eq!(refusal_code(&result), "no_access");
        }
    }

    async fn people_answer_discard_reopen_and_add_options_and_viewers_cannot(db) {
        let s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let output = s.open(read.revision, vec![card("region", vec![address(&read, 1)])]).await.unwrap();
        let id = output.captures[0].card_id.clone();
        let (status, added) = s.act(&s.token, &id, "options", json!({"label": "Both"})).await;
        assert_eq!(status, 200, "{added}");
        assert_eq!(added["choices"][2], json!({"id": "p1", "label": "Both", "added_by": "ada"}));
        let (status, _) = s.act(&s.token, &id, "criteria", json!({"text": "cost"})).await;
        assert_eq!(status, 200);
        let (status, answered) = s.act(&s.token, &id, "answer", json!({"choices": ["p1"]})).await;
        assert_eq!((status, answered["state"].as_str(), answered["answered_by"].as_str()), (200, Some("answered"), Some("ada")));
        let (status, body) = s.act(&s.token, &id, "answer", json!({"choices": ["c9"]})).await;
        assert_eq!((status, body["error"]["code"].as_str()), (422, Some("invalid_answer")));
        let (status, reopened) = s.act(&s.token, &id, "reopen", json!(null)).await;
        assert_eq!((status, reopened["state"].as_str()), (200, Some("reopened")));
        let (status, discarded) = s.act(&s.token, &id, "discard", json!(null)).await;
        assert_eq!((status, discarded["state"].as_str()), (200, Some("discarded")));
        let (status, body) = s.act(&s.token, &id, "discard", json!(null)).await;
        assert_eq!((status, body["error"]["code"].as_str()), (422, Some("invalid_transition")));

        let (viewer, viewer_token) = s.server.account("vic").await;
        s.server.store().set_member(&s.doc, &viewer, margin_protocol::Role::Viewer).await.unwrap();
        let (status, _) = s.act(&viewer_token, &id, "reopen", json!(null)).await;
        assert_eq!(status, 403);
        let (status, list) = s.server.get(Some(&viewer_token), &format!("/documents/{}/decisions", s.doc)).await;
        assert_eq!((status, list["decisions"][0]["state"].as_str()), (200, Some("discarded")));
        let (status, _) = s.act(&s.token, "no-such-card", "reopen", json!(null)).await;
        assert_eq!(status, 404);
    }

    async fn an_answer_survives_rewriting_its_paragraph(db) {
        let s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let output = s.open(read.revision, vec![card("region", vec![address(&read, 1)])]).await.unwrap();
        let id = output.captures[0].card_id.clone();
        s.act(&s.token, &id, "answer", json!({"choices": ["c1"]})).await;
        let now = s.read().await;
        s.tools().edit_plan(&s.owner, &s.doc, EditPlanInput {
            revision: now.revision,
            edits: vec![EditInput::Replace { at: address(&now, 1), text: "Pick a region: decided".into() }],
        }, "ada", None).await.unwrap();
        let cards = s.cards().await;
        assert_eq!((cards[0].state.as_str(), cards[0].answer.clone()), ("answered", Some(margin_protocol::decisions::AnswerBody::Choices(vec!["c1".into()]))));
        // The card still stands beside the same block (same identity).
        assert_eq!(cards[0].anchors[0], s.read().await.outline[1].identity);
    }

    async fn a_card_keeps_what_its_paragraph_said_once_the_paragraph_is_deleted(db) {
        let s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        s.open(read.revision, vec![card("region", vec![address(&read, 1)])]).await.unwrap();
        let now = s.read().await;
        s.tools().edit_plan(&s.owner, &s.doc, EditPlanInput {
            revision: now.revision,
            edits: vec![EditInput::Delete { at: address(&now, 1) }],
        }, "ada", None).await.unwrap();
        assert!(!s.read().await.outline.iter().any(|b| b.text == PLAN[1]), "the paragraph is gone");
        let cards = s.cards().await;
        assert_eq!(cards[0].excerpt.as_deref(), Some(PLAN[1]), "the card still says where it stood");
    }

    async fn identical_replay_after_a_person_added_an_option_is_idempotent(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let region = card("region", vec![address(&read, 1)]);
        let id = s.open(read.revision, vec![region.clone()]).await.unwrap().captures[0].card_id.clone();
        s.act(&s.token, &id, "options", json!({"label": "Both"})).await;
        s.person_inserts(3, "typed at the end").await;
        let replay = s.open(read.revision, vec![region, card("budget", vec![address(&read, 2)])]).await.unwrap();
        let statuses: Vec<_> = replay.captures.iter().map(|c| c.status).collect();
        assert_eq!(statuses, vec![CaptureStatus::AlreadyInDocument, CaptureStatus::Created]);
        assert_eq!((replay.captured, replay.captures[0].card_id.clone()), (2, id));
    }

    async fn replayed_discarded_key_is_not_recreated_or_counted(db) {
        let s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let region = card("region", vec![address(&read, 1)]);
        let id = s.open(read.revision, vec![region.clone()]).await.unwrap().captures[0].card_id.clone();
        s.act(&s.token, &id, "discard", json!(null)).await;
        let replay = s.open(read.revision, vec![region]).await.unwrap();
        assert_eq!((replay.captures[0].status, replay.captured), (CaptureStatus::NotCaptured, 0));
        let cards = s.cards().await;
        assert_eq!((cards.len(), cards[0].state.as_str()), (1, "discarded"));
    }

    async fn mixed_batch_with_a_changed_key_creates_nothing(db) {
        let s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        s.open(read.revision, vec![card("region", vec![address(&read, 1)])]).await.unwrap();
        let mut changed = card("region", vec![address(&read, 1)]);
        changed.question = "Which regions?".into();
        let result = s.open(read.revision, vec![card("budget", vec![address(&read, 2)]), changed]).await;
        assert_eq!(refusal_code(&result), "different_decision");
        assert_eq!(s.cards().await.len(), 1);
    }
}

on_both_backends! {
    async fn planner_tools_answer_over_http_with_the_common_error_shape(db) {
        let s = Scene::new(&db, &PLAN).await;
        let tools = |name: &str| format!("/documents/{}/tools/{name}", s.doc);
        let (status, read) = s.server.post(Some(&s.token), &tools("read_document"), json!(null)).await;
        assert_eq!((status, read["revision"].as_i64()), (200, Some(3)));
        let digest = read["outline"][1]["digest"].clone();
        let batch = json!({"revision": 3, "cards": [{"key": "region", "question": "Which region?", "response": "yes_no", "passages": [{"index": 1, "digest": digest}]}]});
        let (status, opened) = s.server.post(Some(&s.token), &tools("open_decisions"), batch).await;
        assert_eq!((status, opened["summary"].as_str()), (200, Some("added 1 decision")));
        let wrong = json!({"revision": 3, "cards": [{"key": "other", "question": "Q?", "response": "yes_no", "passages": [{"index": 0, "digest": digest}]}]});
        let (status, refused) = s.server.post(Some(&s.token), &tools("open_decisions"), wrong).await;
        assert_eq!((status, refused["error"]["code"].as_str()), (422, Some("address_mismatch")));
        let (status, bad) = s.server.post(Some(&s.token), &tools("open_decisions"), json!({"revision": 3})).await;
        assert_eq!((status, bad["error"]["code"].as_str()), (400, Some("invalid_body")));
    }
}

// Refusals on a live document edited through sync, on both backends: each
// case of the engine's own suite, end to end.
on_both_backends! {
    async fn rewrite_beside_an_identical_copy_refuses_block_rewritten(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let before = s.revision().await;
        s.person.rewrite(1, "Pick a region: EU").await;
        s.person_change(before).await;
        s.person_inserts(3, "Pick a region").await;
        let result = s.open(read.revision, vec![card("region", vec![address(&read, 1)])]).await;
        assert_eq!(refusal_code(&result), "block_rewritten");
        assert!(s.cards().await.is_empty());
    }

    async fn replay_after_a_rewrite_refuses_block_rewritten_with_or_without_a_copy_beside_it(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let region = card("region", vec![address(&read, 1)]);
        let budget = card("budget", vec![address(&read, 2)]);
        s.open(read.revision, vec![region.clone(), budget.clone()]).await.unwrap();
        // Without a copy: "Pick a region" is rewritten.
        let before = s.revision().await;
        s.person.rewrite(1, "Pick a region: EU").await;
        s.person_change(before).await;
        // With a copy: "Budget" is rewritten and an identical one typed after.
        let before = s.revision().await;
        s.person.rewrite(2, "Budget: 10k").await;
        s.person_change(before).await;
        s.person_inserts(3, "Budget").await;
        // The read is still held: each replay is judged by it, and the block
        // it names no longer carries what was read (SPEC D6, D7).
        for (replay, what) in [(region, "without a copy"), (budget, "beside a copy")] {
            let result = s.open(read.revision, vec![replay]).await;
            assert_eq!(refusal_code(&result), "block_rewritten", "{what}");
        }
        assert_eq!(s.cards().await.len(), 2);
    }

    async fn paragraph_repeated_when_read_refuses_repeated_when_read(db) {
        let mut s = Scene::new(&db, &["Same", "Other", "Same"]).await;
        let read = s.read().await;
        s.person_inserts(0, "typed").await;
        let result = s.open(read.revision, vec![card("k", vec![address(&read, 2)])]).await;
        assert_eq!(refusal_code(&result), "repeated_when_read");
    }

    async fn nine_later_reads_evict_the_batch_revision(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        for i in 0..8 {
            s.person_inserts(0, &format!("typed {i}")).await;
            s.read().await;
        }
        let result = s.open(read.revision, vec![card("region", vec![address(&read, 1)])]).await;
        assert_eq!(refusal_code(&result), "read_evicted");
    }

    async fn moved_paragraph_refuses_block_removed_or_moved(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let before = s.revision().await;
        s.person.delete(1).await;
        s.person_change(before).await;
        s.person_inserts(2, "Pick a region").await;
        let result = s.open(read.revision, vec![card("region", vec![address(&read, 1)])]).await;
        assert_eq!(refusal_code(&result), "block_removed_or_moved");
    }

    async fn index_that_disagrees_with_its_digest_refuses_address_mismatch(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let wrong = PassageAddress { index: 2, digest: read.outline[1].digest.clone() };
        assert_eq!(refusal_code(&s.open(read.revision, vec![card("k", vec![wrong.clone()])]).await), "address_mismatch");
        s.person_inserts(0, "typed").await;
        assert_eq!(refusal_code(&s.open(read.revision, vec![card("k", vec![wrong])]).await), "address_mismatch");
        assert!(s.cards().await.is_empty());
    }

    async fn repeated_key_with_any_other_field_refuses_different_decision(db) {
        let s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        s.open(read.revision, vec![card("region", vec![address(&read, 1)])]).await.unwrap();
        let mut variants = vec![card("region", vec![address(&read, 1)]); 5];
        variants[0].question = "Which regions?".into();
        variants[1].description = Some("more context".into());
        variants[2].response = "multiple_choice".into();
        variants[3].choices.push("APAC".into());
        variants[4].passages = vec![address(&read, 2)];
        for variant in variants {
            let result = s.open(read.revision, vec![card("fresh", vec![address(&read, 0)]), variant]).await;
            let Err(ToolError::Refused(refusal)) = result else { panic!("expected a refusal") };
            assert_eq!(refusal.code, "different_decision");
            assert!(refusal.message.contains("card \"region\""), "{}", refusal.message);
        }
        assert_eq!(s.cards().await.len(), 1);
    }

    async fn two_passage_replay_with_its_read_evicted_refuses_until_read_again(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let both = card("both", vec![address(&read, 1), address(&read, 2)]);
        s.open(read.revision, vec![both.clone()]).await.unwrap();
        let before = s.revision().await;
        s.person.rewrite(2, "Budget: 10k").await;
        s.person_change(before).await;
        s.person_inserts(3, "Budget").await;
        for i in 0..9 {
            s.person_inserts(0, &format!("typed {i}")).await;
            s.read().await;
        }
        assert_eq!(refusal_code(&s.open(read.revision, vec![both]).await), "read_evicted");
        let fresh = s.read().await;
        let index = |text: &str| fresh.outline.iter().position(|b| b.text == text).unwrap();
        let retry = card("both", vec![address(&fresh, index("Pick a region")), address(&fresh, index("Budget: 10k"))]);
        for _ in 0..2 {
            let output = s.open(fresh.revision, vec![retry.clone()]).await.unwrap();
            assert_eq!((output.captures[0].status, output.captured), (CaptureStatus::AlreadyInDocument, 1));
        }
        assert_eq!(s.cards().await.len(), 1);
    }

    async fn replay_with_its_read_evicted_beside_a_copy_of_its_rewritten_paragraph_refuses_read_evicted(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let region = card("region", vec![address(&read, 1)]);
        s.open(read.revision, vec![region.clone()]).await.unwrap();
        let before = s.revision().await;
        s.person.rewrite(1, "Pick a region: EU").await;
        s.person_change(before).await;
        s.person_inserts(3, "Pick a region").await;
        for i in 0..9 {
            s.person_inserts(0, &format!("typed {i}")).await;
            s.read().await;
        }
        // Without the read, the card no longer stands beside what it was
        // opened on, and the copy is not taken for it (SPEC D7).
        assert_eq!(refusal_code(&s.open(read.revision, vec![region]).await), "read_evicted");
        assert_eq!(s.cards().await.len(), 1);
    }

    async fn stale_replay_naming_another_intact_paragraph_refuses_different_decision(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        s.open(read.revision, vec![card("region", vec![address(&read, 1)])]).await.unwrap();
        s.person_inserts(3, "typed").await;
        let result = s.open(read.revision, vec![card("region", vec![address(&read, 2)])]).await;
        assert_eq!(refusal_code(&result), "different_decision");
    }

    async fn one_bad_card_among_many_creates_nothing(db) {
        let s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let mut cards: Vec<_> = (0..12).map(|i| card(&format!("k{i}"), vec![address(&read, i % 3)])).collect();
        cards.push(card("bad", vec![PassageAddress { index: 0, digest: "00".repeat(32) }]));
        assert_eq!(refusal_code(&s.open(read.revision, cards).await), "address_mismatch");
        assert!(s.cards().await.is_empty());
    }

    async fn bad_card_input_is_a_clear_error_and_creates_nothing(db) {
        let s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let mut cases = vec![card("k", vec![address(&read, 1)]); 6];
        cases[0].question = String::new();
        cases[1].key = "has space".into();
        cases[2].response = "poll".into();
        cases[3].choices = vec!["only one".into()];
        cases[4].passages = vec![PassageAddress { index: 1, digest: "not-hex".into() }];
        cases[5].question = "tab\u{7}bell".into();
        for case in cases {
            let result = s.open(read.revision, vec![case.clone()]).await;
            assert_eq!(refusal_code(&result), "invalid_input", "{case:?}");
        }
        let twice = s.open(read.revision, vec![card("k", vec![address(&read, 1)]), card("k", vec![address(&read, 2)])]).await;
        assert_eq!(refusal_code(&twice), "invalid_input");
        assert_eq!(refusal_code(&s.open(read.revision + 10, vec![card("k", vec![address(&read, 1)])]).await), "invalid_input");
        assert!(s.cards().await.is_empty());
    }
}

on_both_backends! {
    async fn a_full_batch_at_its_bounds_fits_the_tool_body_limit(db) {
        let s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let cards: Vec<_> = (0..32)
            .map(|i| {
                let mut c = card(&format!("k{i}"), vec![address(&read, i % 3)]);
                c.description = Some("d".repeat(4000));
                c
            })
            .collect();
        let body = json!({"revision": read.revision, "cards": cards});
        assert!(body.to_string().len() > 64 * 1024);
        let path = format!("/documents/{}/tools/open_decisions", s.doc);
        let (status, output) = s.server.post(Some(&s.token), &path, body).await;
        assert_eq!((status, output["captured"].as_u64()), (200, Some(32)));
        // Other routes keep the 64 KiB bound.
        let (status, body) = s.server.post(Some(&s.token), "/documents", json!({"title": "x".repeat(70_000)})).await;
        assert_eq!((status, body["error"]["code"].as_str()), (413, Some("body_too_large")));
    }
}

/// The state a card's mirror shows, if the document mirrors it.
fn mirrored_state(client: &SyncClient, id: &str) -> Option<String> {
    let (_, json) = client
        .projected_cards()
        .into_iter()
        .find(|(card, _)| card == id)?;
    let view: DecisionCardView = serde_json::from_str(&json).ok()?;
    Some(view.state)
}

on_both_backends! {
    // A row changed without its mirror (a crash between the two, before a
    // card's change and its mirror shared one transaction) is put right
    // when the document loads.
    async fn a_card_whose_mirror_drifted_from_its_row_is_repaired_when_the_document_loads(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let opened = s.open(read.revision, vec![card("region", vec![address(&read, 1)])]).await.unwrap();
        let id = opened.captures[0].card_id.clone();
        assert!(s.person.until(|c| mirrored_state(c, &id).as_deref() == Some("open")).await);
        s.server.restart().await;
        // The crash's state: the row changed, the mirror did not.
        let store = db.open().await;
        let mut stored = store.card(&s.doc, &id).await.unwrap();
        stored.card.state = margin_decisions::CardState::Discarded;
        stored.version += 1;
        store.update_card(&s.doc, &stored).await.unwrap();
        let before = store.revision(&s.doc).await.unwrap();
        let person = SyncClient::connect(&s.server.sync_url(&s.doc, &s.token)).await;
        assert_eq!(mirrored_state(&person, &id).as_deref(), Some("discarded"));
        // The repair is committed, once: a second load changes nothing.
        assert_eq!(store.revision(&s.doc).await.unwrap(), before + 1);
        drop(person);
        s.server.restart().await;
        let again = SyncClient::connect(&s.server.sync_url(&s.doc, &s.token)).await;
        assert_eq!(mirrored_state(&again, &id).as_deref(), Some("discarded"));
        assert_eq!(store.revision(&s.doc).await.unwrap(), before + 1);
    }

    async fn replaying_a_card_whose_mirror_is_gone_puts_it_back(db) {
        let mut s = Scene::new(&db, &PLAN).await;
        let read = s.read().await;
        let region = card("region", vec![address(&read, 1)]);
        let opened = s.open(read.revision, vec![region.clone()]).await.unwrap();
        let id = opened.captures[0].card_id.clone();
        assert!(s.person.until(|c| mirrored_state(c, &id).is_some()).await);
        let revision = s.revision().await;
        s.person.forget_card(&id).await;
        s.person_change(revision).await;
        let mut watcher = SyncClient::connect(&s.server.sync_url(&s.doc, &s.token)).await;
        assert_eq!(mirrored_state(&watcher, &id), None);
        let replay = s.open(read.revision, vec![region]).await.unwrap();
        assert_eq!(replay.captures[0].status, CaptureStatus::AlreadyInDocument);
        assert!(watcher.until(|c| mirrored_state(c, &id).as_deref() == Some("open")).await);
        // The replay answered from the revision its repair made.
        assert_eq!(replay.revision, s.revision().await);
        // A replay with nothing to repair writes nothing.
        let quiet = s.open(read.revision, vec![card("region", vec![address(&read, 1)])]).await.unwrap();
        assert_eq!(quiet.revision, replay.revision);
    }
}
