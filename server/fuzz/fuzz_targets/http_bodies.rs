//! `http_bodies`: the JSON request bodies of the HTTP API.
//!
//! Each type a handler takes as `JsonBody<T>` (server/src/http/extract.rs;
//! axum's `Json` underneath, so `serde_json::from_slice`) is parsed from
//! the same bytes: none may panic on any body a client sends. For those
//! that parse, serialising and parsing again must give an equal value, so
//! the types' serde attributes (`deny_unknown_fields`, defaults, skipped
//! `None`s, internally tagged edits) describe one shape both ways: the
//! Rust SDK serialises the tool inputs and answers it sends with them.
//!
//! The list, by handler (server/src/http/): documents::create
//! `CreateDocument`, documents::add_member `AddMember`, chat::post and
//! planner::invoke `PostChat`, decisions::answer `AnswerBody`,
//! decisions::add_option `AddOption`, decisions::add_criterion
//! `AddCriterion`, machines::pair `PairMachine`, tools::edit_plan
//! `EditPlanInput`, tools::open_decisions `OpenDecisionsInput`,
//! tools::open_decision and tools::ask `OpenDecisionInput`. Add a type
//! here when a handler takes a new one.
#![no_main]

use std::fmt::Debug;

use libfuzzer_sys::fuzz_target;
use margin_protocol::chat::PostChat;
use margin_protocol::decisions::{
    AddCriterion, AddOption, AnswerBody, EditPlanInput, OpenDecisionInput, OpenDecisionsInput,
};
use margin_protocol::link::PairMachine;
use margin_protocol::{AddMember, CreateDocument};
use serde::de::DeserializeOwned;
use serde::Serialize;

fuzz_target!(|data: &[u8]| {
    round_trip::<CreateDocument>(data);
    round_trip::<AddMember>(data);
    round_trip::<PostChat>(data);
    round_trip::<AnswerBody>(data);
    round_trip::<AddOption>(data);
    round_trip::<AddCriterion>(data);
    round_trip::<PairMachine>(data);
    round_trip::<EditPlanInput>(data);
    round_trip::<OpenDecisionsInput>(data);
    round_trip::<OpenDecisionInput>(data);
});

fn round_trip<T>(data: &[u8])
where
    T: DeserializeOwned + Serialize + PartialEq + Debug,
{
    let Ok(value) = serde_json::from_slice::<T>(data) else {
        return;
    };
    let json = serde_json::to_vec(&value).expect("a parsed body serialises");
    match serde_json::from_slice::<T>(&json) {
        Ok(again) => assert_eq!(
            again,
            value,
            "{} round trip through {}",
            std::any::type_name::<T>(),
            String::from_utf8_lossy(&json)
        ),
        Err(e) => panic!(
            "{} does not parse its own JSON {}: {e}",
            std::any::type_name::<T>(),
            String::from_utf8_lossy(&json)
        ),
    }
}
