//! Each invariant of the Yjs v1 format the check keeps, refused by name
//! (SPEC A3a), and every past yrs finding under
//! server/fuzz/regressions/document_update refused by the one it breaks.

use margin_sync_core::encode::{string, var};
use margin_sync_core::{decode, Id, Known, Reference, Refusal};
use pretty_assertions::assert_eq;

const ORIGIN: u8 = 0x80;
const RIGHT: u8 = 0x40;
const SUB: u8 = 0x20;
const STRING: u8 = 4;
const TYPE: u8 = 7;

/// Where an item is written, as an update says it.
enum At {
    Root(&'static str),
    Parent(u64, u32),
    Origin(u64, u32),
    Right(u64, u32),
    Between((u64, u32), (u64, u32)),
}

fn id(out: &mut Vec<u8>, (client, clock): (u64, u32)) {
    var(out, client);
    var(out, u64::from(clock));
}

/// An item of `tag` at `at`, with its content bytes.
fn item(at: At, tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match at {
        At::Root(name) => {
            out.push(tag);
            var(&mut out, 1);
            string(&mut out, name);
        }
        At::Parent(client, clock) => {
            out.push(tag);
            var(&mut out, 0);
            id(&mut out, (client, clock));
        }
        At::Origin(client, clock) => {
            out.push(tag | ORIGIN);
            id(&mut out, (client, clock));
        }
        At::Right(client, clock) => {
            out.push(tag | RIGHT);
            id(&mut out, (client, clock));
        }
        At::Between(left, right) => {
            out.push(tag | ORIGIN | RIGHT);
            id(&mut out, left);
            id(&mut out, right);
        }
    }
    out.extend_from_slice(content);
    out
}

fn text(at: At, text: &str) -> Vec<u8> {
    let mut content = Vec::new();
    string(&mut content, text);
    item(at, STRING, &content)
}

/// A paragraph element (an XmlElement type).
fn paragraph(at: At) -> Vec<u8> {
    let mut content = vec![3];
    string(&mut content, "paragraph");
    item(at, TYPE, &content)
}

fn gc(len: u32) -> Vec<u8> {
    let mut out = vec![0];
    var(&mut out, u64::from(len));
    out
}

/// A client's run of structs from `clock`.
fn run(client: u64, clock: u32, structs: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    var(&mut out, structs.len() as u64);
    var(&mut out, client);
    var(&mut out, u64::from(clock));
    for s in structs {
        out.extend_from_slice(s);
    }
    out
}

/// An update of `runs` and a delete set of `deletes` (client, ranges).
fn update(runs: &[Vec<u8>], deletes: &[(u64, &[(u32, u32)])]) -> Vec<u8> {
    let mut out = Vec::new();
    var(&mut out, runs.len() as u64);
    for r in runs {
        out.extend_from_slice(r);
    }
    var(&mut out, deletes.len() as u64);
    for (client, ranges) in deletes {
        var(&mut out, *client);
        var(&mut out, ranges.len() as u64);
        for &(clock, len) in *ranges {
            var(&mut out, u64::from(clock));
            var(&mut out, u64::from(len));
        }
    }
    out
}

/// What checking `bytes` against `known` says.
fn verdict(known: &Known, bytes: &[u8]) -> Result<(), Refusal> {
    let update = decode(bytes)?;
    known.check(&update).map(|_| ())
}

/// A document holding `updates`, each checked and learned in turn.
fn holding(updates: &[Vec<u8>]) -> Known {
    let mut known = Known::new();
    for bytes in updates {
        let update = decode(bytes).expect("a test's base update decodes");
        let checked = known.check(&update).expect("a test's base update fits");
        known.order(&update, &checked);
        known.learn(&checked);
    }
    known
}

/// A document of one paragraph (1:0) holding the text "hello" (1:1..6).
fn one_paragraph() -> Known {
    holding(&[update(
        &[run(
            1,
            0,
            &[
                paragraph(At::Root("prosemirror")),
                text(At::Parent(1, 0), "hello"),
            ],
        )],
        &[],
    )])
}

#[test]
fn what_a_yjs_client_writes_is_accepted() {
    let known = one_paragraph();
    // Another client types after "hello", deletes "ll" and adds a paragraph.
    let typed = update(
        &[run(
            2,
            0,
            &[
                text(At::Origin(1, 5), " world"),
                paragraph(At::Origin(1, 0)),
            ],
        )],
        &[(1, &[(3, 2)])],
    );
    assert_eq!(verdict(&known, &typed), Ok(()));
    // The same client's next update continues its clock.
    let known = holding(&[
        update(
            &[run(
                1,
                0,
                &[
                    paragraph(At::Root("prosemirror")),
                    text(At::Parent(1, 0), "hello"),
                ],
            )],
            &[],
        ),
        typed,
    ]);
    let more = update(&[run(2, 7, &[text(At::Origin(2, 5), "!")])], &[]);
    assert_eq!(verdict(&known, &more), Ok(()));
}

#[test]
fn structs_the_document_holds_are_skipped_whoever_sends_them() {
    let known = one_paragraph();
    // A sync step 2 that repeats what the server holds and adds one letter.
    let again = update(
        &[run(
            1,
            0,
            &[
                paragraph(At::Root("prosemirror")),
                text(At::Parent(1, 0), "hello!"),
            ],
        )],
        &[],
    );
    let update = decode(&again).unwrap();
    let checked = known.check(&update).unwrap();
    assert_eq!(checked.new_clients().collect::<Vec<_>>(), vec![1]);
}

#[test]
fn one_clients_structs_in_two_runs_are_refused() {
    // uaf-resolve-conflict, uaf-splice, uaf-try-squash, state-empty-block,
    // state-not-utf8, panic-encode-diff, panic-apply-block-store-push: yrs
    // appends a second run to the first, out of clock order.
    let twice = update(
        &[
            run(1, 0, &[paragraph(At::Root("prosemirror"))]),
            run(1, 0, &[gc(3)]),
        ],
        &[],
    );
    assert_eq!(
        verdict(&Known::new(), &twice),
        Err(Refusal::RepeatedClient(1))
    );
}

#[test]
fn structs_that_start_past_what_the_document_holds_are_refused() {
    // panic-apply-find-index: yrs fills the hole with a Skip block, which
    // later lookups do not expect.
    let hole = update(
        &[run(96, 16_320, &[paragraph(At::Root("prosemirror"))])],
        &[],
    );
    assert_eq!(
        verdict(&Known::new(), &hole),
        Err(Refusal::StartsPastKnown {
            client: 96,
            clock: 16_320,
            known: 0
        })
    );
}

#[test]
fn a_reference_to_a_struct_nobody_holds_is_refused() {
    let known = one_paragraph();
    for (at, what) in [
        (At::Origin(1, 6), Reference::Origin),
        (At::Right(7, 0), Reference::RightOrigin),
        (At::Parent(1, 99), Reference::Parent),
    ] {
        let bytes = update(&[run(2, 0, &[text(at, "x")])], &[]);
        let id = match what {
            Reference::Origin => Id::new(1, 6),
            Reference::RightOrigin => Id::new(7, 0),
            Reference::Parent => Id::new(1, 99),
        };
        assert_eq!(
            verdict(&known, &bytes),
            Err(Refusal::Missing {
                of: Id::new(2, 0),
                what,
                id
            })
        );
    }
}

#[test]
fn a_reference_into_or_after_the_items_own_run_is_refused() {
    let known = one_paragraph();
    let own = update(
        &[run(
            2,
            0,
            &[text(At::Origin(1, 5), "ab"), text(At::Origin(2, 3), "c")],
        )],
        &[],
    );
    assert_eq!(
        verdict(&known, &own),
        Err(Refusal::OwnRun {
            of: Id::new(2, 2),
            what: Reference::Origin
        })
    );
    let itself = update(&[run(2, 0, &[text(At::Right(2, 0), "a")])], &[]);
    assert_eq!(
        verdict(&known, &itself),
        Err(Refusal::OwnRun {
            of: Id::new(2, 0),
            what: Reference::RightOrigin
        })
    );
}

#[test]
fn items_that_wait_on_each_other_are_refused() {
    // 2:0 comes after 3:0, which comes after 2:1 — written after 2:0.
    let known = one_paragraph();
    let circle = update(
        &[
            run(
                2,
                0,
                &[text(At::Origin(3, 0), "a"), text(At::Origin(1, 5), "b")],
            ),
            run(3, 0, &[text(At::Origin(2, 1), "c")]),
        ],
        &[],
    );
    assert_eq!(verdict(&known, &circle), Err(Refusal::Cycle(Id::new(3, 0))));
    // The same items in an order they could have been written: accepted.
    let chain = update(
        &[
            run(
                2,
                0,
                &[text(At::Origin(1, 5), "a"), text(At::Origin(3, 0), "b")],
            ),
            run(3, 0, &[text(At::Origin(2, 0), "c")]),
        ],
        &[],
    );
    assert_eq!(verdict(&known, &chain), Ok(()));
}

/// Whether placing `bytes` in `known`'s lists finds an item that sits
/// where a Yjs client may not have written it.
fn suspect(known: &mut Known, bytes: &[u8]) -> bool {
    let update = decode(bytes).unwrap();
    let checked = known.check(&update).unwrap();
    !known.order(&update, &checked).is_empty()
}

#[test]
fn an_item_whose_right_origin_lies_before_its_origin_is_suspect() {
    let mut known = one_paragraph();
    let crossed = update(&[run(2, 0, &[text(At::Between((1, 4), (1, 2)), "x")])], &[]);
    assert!(suspect(&mut known, &crossed));
    known.unplace();
    // Between neighbours: not.
    let between = update(&[run(2, 0, &[text(At::Between((1, 2), (1, 3)), "x")])], &[]);
    assert!(!suspect(&mut known, &between));
}

#[test]
fn an_item_whose_origins_enclose_what_its_writer_had_seen_is_suspect() {
    // "hello" is 1:1..6; an item between 1:1 and 1:4 would have been
    // written beside 1:2 and 1:3, which its writer knew (they precede
    // its right origin 1:4 in client 1's clock).
    let mut known = one_paragraph();
    let wide = update(&[run(2, 0, &[text(At::Between((1, 1), (1, 4)), "x")])], &[]);
    assert!(suspect(&mut known, &wide));
}

#[test]
fn items_written_concurrently_in_one_gap_are_not_suspect() {
    // Two writers type between "he" and "llo" without seeing each other;
    // a third then types between the first's text and "llo".
    let mut known = one_paragraph();
    let first = update(
        &[run(2, 0, &[text(At::Between((1, 2), (1, 3)), "ab")])],
        &[],
    );
    let second = update(
        &[run(3, 0, &[text(At::Between((1, 2), (1, 3)), "cd")])],
        &[],
    );
    for bytes in [&first, &second] {
        assert!(!suspect(&mut known, bytes));
        let update = decode(bytes).unwrap();
        let checked = known.check(&update).unwrap();
        known.learn(&checked);
    }
    let third = update(&[run(4, 0, &[text(At::Between((2, 1), (1, 3)), "e")])], &[]);
    assert!(!suspect(&mut known, &third));
}

#[test]
fn a_parent_that_is_not_a_type_is_refused() {
    // state-does-not-apply: yrs integrates the update's other items, then
    // fails on this one with InvalidParent, half applied.
    let known = one_paragraph();
    let into_text = update(&[run(2, 0, &[text(At::Parent(1, 1), "x")])], &[]);
    assert_eq!(
        verdict(&known, &into_text),
        Err(Refusal::ParentNotType {
            of: Id::new(2, 0),
            parent: Id::new(1, 1)
        })
    );
}

#[test]
fn a_child_of_a_collected_type_is_accepted_as_yrs_collects_it() {
    let known = holding(&[update(&[run(1, 0, &[gc(2)])], &[])]);
    let child = update(&[run(2, 0, &[text(At::Parent(1, 0), "x")])], &[]);
    assert_eq!(verdict(&known, &child), Ok(()));
}

#[test]
fn an_item_with_one_neighbour_collected_and_the_other_in_place_is_suspect() {
    // The paragraph 1:0 holds "hello" (1:1..6); client 3's 0..3 were
    // collected (their type was deleted). Yjs collects an item beside a
    // collected neighbour; yrs places it by the other one alone, where a
    // replica loading the document later may place it otherwise. A Yjs
    // client can write one (Yjs' redo did, in the corpus of
    // web-tests/tests/update-corpus.test.mjs), so it is not refused: it is
    // tried on a copy first.
    let base = [
        update(
            &[run(
                1,
                0,
                &[
                    paragraph(At::Root("prosemirror")),
                    text(At::Parent(1, 0), "hello"),
                ],
            )],
            &[],
        ),
        update(&[run(3, 0, &[gc(3)])], &[]),
    ];
    let left_collected = update(&[run(2, 0, &[text(At::Between((3, 1), (1, 3)), "x")])], &[]);
    assert!(suspect(&mut holding(&base), &left_collected));
    let right_collected = update(&[run(2, 0, &[text(At::Between((1, 3), (3, 1)), "x")])], &[]);
    assert!(suspect(&mut holding(&base), &right_collected));
    // Both collected, or the one neighbour there is: every replica
    // collects the item, and nothing is placed.
    let both = update(&[run(2, 0, &[text(At::Between((3, 0), (3, 2)), "x")])], &[]);
    assert!(!suspect(&mut holding(&base), &both));
    let only = update(&[run(2, 0, &[text(At::Origin(3, 2), "x")])], &[]);
    assert!(!suspect(&mut holding(&base), &only));
    // Beside live neighbours, typing is not suspect.
    let typed = update(&[run(2, 0, &[text(At::Between((1, 2), (1, 3)), "x")])], &[]);
    assert!(!suspect(&mut holding(&base), &typed));
}

#[test]
fn an_item_between_neighbours_in_different_places_is_refused() {
    // The paragraph 1:0 is in the fragment; its text 1:1.. is inside it.
    let known = one_paragraph();
    let straddling = update(&[run(2, 0, &[text(At::Between((1, 0), (1, 3)), "x")])], &[]);
    assert_eq!(
        verdict(&known, &straddling),
        Err(Refusal::OriginsDisagree(Id::new(2, 0)))
    );
}

#[test]
fn the_new_part_of_a_held_item_must_continue_it_where_it_is() {
    let known = one_paragraph();
    // 1:1..6 is "hello" in the paragraph; this claims 1:1..8 is at the
    // root, so its new part (1:6..8) would follow text in another place.
    let moved = update(
        &[run(1, 1, &[text(At::Root("prosemirror"), "hello!!")])],
        &[],
    );
    assert_eq!(
        verdict(&known, &moved),
        Err(Refusal::SplitDisagrees(Id::new(1, 1)))
    );
}

#[test]
fn deletions_of_what_nobody_holds_are_refused() {
    let known = one_paragraph();
    let past = update(&[], &[(1, &[(4, 3)])]);
    assert_eq!(
        verdict(&known, &past),
        Err(Refusal::DeletePastKnown {
            client: 1,
            end: 7,
            known: 6
        })
    );
    // Deleting what the same update writes is fine.
    let own = update(
        &[run(2, 0, &[text(At::Origin(1, 5), "abc")])],
        &[(2, &[(1, 2)])],
    );
    assert_eq!(verdict(&known, &own), Ok(()));
}

#[test]
fn delete_sets_a_yjs_encoder_would_not_write_are_refused() {
    let known = one_paragraph();
    type Deletes<'a> = &'a [(u64, &'a [(u32, u32)])];
    let cases: [(Deletes, Refusal); 4] = [
        (
            &[(1, &[(3, 1), (1, 1)])],
            Refusal::UnorderedDeletes(Id::new(1, 1)),
        ),
        (
            &[(1, &[(1, 3), (2, 1)])],
            Refusal::UnorderedDeletes(Id::new(1, 2)),
        ),
        (&[(1, &[(1, 0)])], Refusal::EmptyDeleteRange(Id::new(1, 1))),
        (
            &[(1, &[(1, 1)]), (1, &[(3, 1)])],
            Refusal::RepeatedDeleteClient(1),
        ),
    ];
    for (deletes, refusal) in cases {
        assert_eq!(verdict(&known, &update(&[], deletes)), Err(refusal));
    }
    assert_eq!(
        verdict(&known, &update(&[], &[(1, &[])])),
        Err(Refusal::EmptyDeleteRun(1))
    );
    assert_eq!(
        verdict(&known, &update(&[], &[(1, &[(u32::MAX, 2)])])),
        Err(Refusal::DeleteOverflow(1))
    );
}

#[test]
fn clocks_past_two_to_the_32_are_refused() {
    // panic-encode-diff: yrs adds a block's length to a u32 clock.
    let wraps = update(&[run(1, u32::MAX - 1, &[gc(5)])], &[]);
    assert_eq!(decode(&wraps), Err(Refusal::ClockOverflow(1)));
}

#[test]
fn a_client_id_past_53_bits_is_refused() {
    // debug-assert-client-id: yrs asserts on it in debug builds and masks
    // it in release ones, where it then names another client.
    let big = update(&[run(1 << 53, 0, &[gc(1)])], &[]);
    assert_eq!(
        decode(&big),
        Err(Refusal::Malformed(margin_sync_core::Malformed::TooLarge(2)))
    );
}

#[test]
fn counts_the_input_cannot_hold_are_refused_before_anything_is_reserved() {
    use margin_sync_core::Malformed::CountTooLarge;
    // oom-update-clients-count: gigabytes of hash map for 4 bytes.
    assert_eq!(decode(&[210, 210, 225, 16]), Err(CountTooLarge(0).into()));
    // A client declaring more structs than bytes remain.
    let mut many = Vec::new();
    var(&mut many, 1);
    var(&mut many, 1_000_000);
    assert_eq!(decode(&many), Err(CountTooLarge(1).into()));
}

#[test]
fn numbers_in_a_longer_spelling_are_refused() {
    // oom-update-blocks-count made yrs reserve gigabytes this way.
    assert_eq!(
        decode(&[0x80, 0x00, 0]),
        Err(margin_sync_core::Malformed::Overlong(0).into())
    );
}

#[test]
fn content_yrs_reads_differently_from_yjs_is_refused() {
    // panic-merge-pending: yrs reads legacy JSON with a string more than
    // it writes, so its own re-encoding does not decode again.
    let json = update(
        &[run(12, 92, &[item(At::Root("prosemirror"), 2, &[0, 0])])],
        &[],
    );
    assert_eq!(decode(&json), Err(Refusal::LegacyJson(Id::new(12, 92))));
    // An XML hook's name, which Yjs writes and yrs does not read.
    let hook = update(
        &[run(
            1,
            0,
            &[item(At::Root("prosemirror"), TYPE, &[5, 1, b'h'])],
        )],
        &[],
    );
    assert_eq!(decode(&hook), Err(Refusal::XmlHook(Id::new(1, 0))));
    // A tag's fifth bit, which yrs ignores and Yjs reads.
    let fifth = update(
        &[run(
            1,
            0,
            &[item(At::Root("prosemirror"), 0x14, &[1, b'a'])],
        )],
        &[],
    );
    assert_eq!(
        decode(&fifth),
        Err(Refusal::UnknownContent {
            at: Id::new(1, 0),
            tag: 0x14
        })
    );
    // GC with item flags: GC to Yjs, an unknown item to yrs.
    let flagged = update(&[run(1, 0, &[vec![0x80, 1, 0, 3]])], &[]);
    assert_eq!(
        decode(&flagged),
        Err(Refusal::UnknownContent {
            at: Id::new(1, 0),
            tag: 0x80
        })
    );
    // A parent flag that is neither 0 nor 1: Yjs and yrs read it as an
    // id (state-does-not-apply).
    let flag = update(&[run(4, 6, &[vec![STRING, 2, 1, 0, 1, b'a']])], &[]);
    assert_eq!(decode(&flag), Err(Refusal::ParentInfo(Id::new(4, 6))));
}

#[test]
fn content_no_margin_document_holds_is_refused() {
    let doc = update(&[run(1, 0, &[item(At::Root("prosemirror"), 9, &[0])])], &[]);
    assert_eq!(decode(&doc), Err(Refusal::Subdocument(Id::new(1, 0))));
    let skip = update(&[run(1, 0, &[vec![10, 3]])], &[]);
    assert_eq!(decode(&skip), Err(Refusal::Skip(Id::new(1, 0))));
    let unknown_type = update(
        &[run(1, 0, &[item(At::Root("prosemirror"), TYPE, &[8])])],
        &[],
    );
    assert_eq!(
        decode(&unknown_type),
        Err(Refusal::UnknownType {
            at: Id::new(1, 0),
            tag: 8
        })
    );
}

#[test]
fn embedded_text_every_client_cannot_parse_is_refused() {
    // A format mark whose value is not JSON: every client relayed it
    // throws in JSON.parse and stops applying.
    let mut content = Vec::new();
    string(&mut content, "bold");
    string(&mut content, "{not json");
    let format = update(
        &[run(1, 0, &[item(At::Root("prosemirror"), 6, &content)])],
        &[],
    );
    assert_eq!(decode(&format), Err(Refusal::NotJson(Id::new(1, 0))));
}

#[test]
fn values_a_lib0_encoder_would_not_write_are_refused() {
    // A lib0 Any nested past the bound, and a tag lib0 does not define.
    let mut deep = vec![1];
    deep.extend(std::iter::repeat_n([117u8, 1], 100).flatten());
    deep.push(126);
    let nested = update(
        &[run(1, 0, &[item(At::Root("prosemirror"), 8, &deep)])],
        &[],
    );
    assert_eq!(decode(&nested), Err(Refusal::TooDeep(Id::new(1, 0))));
    let odd = update(
        &[run(1, 0, &[item(At::Root("prosemirror"), 8, &[1, 100])])],
        &[],
    );
    assert_eq!(
        decode(&odd),
        Err(Refusal::UnknownAny {
            at: Id::new(1, 0),
            tag: 100
        })
    );
}

#[test]
fn structs_of_no_length_are_refused() {
    assert_eq!(
        decode(&update(
            &[run(1, 0, &[text(At::Root("prosemirror"), "")])],
            &[]
        )),
        Err(Refusal::EmptyStruct(Id::new(1, 0)))
    );
    assert_eq!(
        decode(&update(&[run(1, 0, &[gc(0)])], &[])),
        Err(Refusal::EmptyStruct(Id::new(1, 0)))
    );
    assert_eq!(
        decode(&update(&[run(1, 0, &[])], &[])),
        Err(Refusal::EmptyRun(1))
    );
}

#[test]
fn bytes_past_the_delete_set_are_refused() {
    let mut bytes = update(&[], &[]);
    bytes.push(0);
    assert_eq!(decode(&bytes), Err(Refusal::TrailingBytes));
}

#[test]
fn map_entries_keep_their_key_through_their_origin() {
    // A map entry under "a", then a new value for "a" after it: fine. A
    // sequence item between the entry and the paragraph is not.
    let mut any = vec![1, 119];
    string(&mut any, "v");
    let entry = {
        let mut out = vec![8 | SUB];
        var(&mut out, 1);
        string(&mut out, "decisions");
        string(&mut out, "a");
        out.extend_from_slice(&any);
        out
    };
    let known = holding(&[update(
        &[run(1, 0, &[paragraph(At::Root("prosemirror")), entry])],
        &[],
    )]);
    let next = update(&[run(2, 0, &[item(At::Origin(1, 1), 8, &any)])], &[]);
    assert_eq!(verdict(&known, &next), Ok(()));
    let across = update(
        &[run(2, 0, &[item(At::Between((1, 1), (1, 0)), 8, &any)])],
        &[],
    );
    assert_eq!(
        verdict(&known, &across),
        Err(Refusal::OriginsDisagree(Id::new(2, 0)))
    );
}

/// Every input the fuzzer found, with the invariant it breaks first (or,
/// for a finding that fits the format and refers to the history, the test
/// that refuses it).
#[test]
fn every_past_yrs_finding_is_refused_by_the_invariant_it_breaks() {
    use margin_sync_core::Malformed::{CountTooLarge, Overlong, TooLarge};
    let expected: [(&str, Option<Refusal>); 17] = [
        ("debug-assert-client-id-957eddd4", Some(TooLarge(2).into())),
        // live.rs: an_item_next_to_collected_text_is_refused
        ("divergent-gc-neighbour-d50c5891", None),
        // live.rs: an_update_placed_differently_by_a_later_reader_is_refused
        ("divergent-order-62da8139", None),
        ("oom-update-blocks-count-15f9d1d4", Some(Overlong(1).into())),
        (
            "oom-update-clients-count-30630f89",
            Some(CountTooLarge(0).into()),
        ),
        (
            "panic-apply-block-store-push-37c37fbb",
            Some(Refusal::RepeatedClient(0)),
        ),
        (
            "panic-apply-find-index-571549b3",
            Some(Refusal::RepeatedClient(0)),
        ),
        (
            "panic-encode-diff-5b3bca98",
            Some(Refusal::RepeatedClient(0)),
        ),
        (
            "panic-encode-diff-div-zero-4cf2354f",
            Some(TooLarge(14).into()),
        ),
        (
            "panic-merge-pending-1ca9b7fd",
            Some(Refusal::LegacyJson(Id::new(12, 92))),
        ),
        (
            "state-does-not-apply-b5bce407",
            Some(Refusal::ParentInfo(Id::new(4, 6))),
        ),
        (
            "state-empty-block-59be9a35",
            Some(Refusal::RepeatedClient(0)),
        ),
        ("state-not-utf8-cbf9e0c3", Some(Refusal::RepeatedClient(0))),
        (
            "uaf-resolve-conflict-0f42f147",
            Some(Refusal::RepeatedClient(0)),
        ),
        ("uaf-splice-f74a32b3", Some(Refusal::RepeatedClient(1))),
        ("uaf-try-squash-48102b91", Some(Refusal::RepeatedClient(0))),
        // An update the checks take: it found the document's rendering,
        // not yrs, at fault (the state vector was written in hash order).
        ("unordered-state-vector-dbc2a223", None),
    ];
    let folder = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fuzz/regressions/document_update"
    );
    let mut files: Vec<String> = std::fs::read_dir(folder)
        .expect("the findings folder")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    files.sort();
    let named: Vec<&str> = expected.iter().map(|(name, _)| *name).collect();
    assert_eq!(files, named, "a finding without an expected refusal");
    for (name, refusal) in expected {
        let bytes = std::fs::read(format!("{folder}/{name}")).expect("a finding");
        // The target's first byte picks the document: 0, an empty one.
        let (selector, update) = bytes.split_first().expect("a finding has bytes");
        match refusal {
            Some(refusal) => {
                assert_eq!(*selector, 0, "{name}");
                assert_eq!(verdict(&Known::new(), update), Err(refusal), "{name}");
            }
            None => assert_ne!(*selector & 1, 0, "{name} is sent to the history"),
        }
    }
}
