//! Documents, members and outlines over HTTP (SPEC S4, A1).
//!
//! ```
//! use margin_protocol::{CreateDocument, DocumentInfo, Role};
//! let req: CreateDocument = serde_json::from_str(r#"{"title":"Q3 launch"}"#).unwrap();
//! assert_eq!(req.title, "Q3 launch");
//! let info = DocumentInfo {
//!     id: "d1".into(),
//!     title: req.title,
//!     revision: 0,
//!     role: Role::Owner,
//!     archived: false,
//!     created_at: 1764400000000,
//!     edited_at: None,
//!     edited_by: None,
//! };
//! assert_eq!(
//!     serde_json::to_string(&info).unwrap(),
//!     r#"{"id":"d1","title":"Q3 launch","revision":0,"role":"owner","archived":false,"created_at":1764400000000,"edited_at":null,"edited_by":null}"#
//! );
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest document title accepted, in UTF-8 bytes.
pub const MAX_TITLE_BYTES: usize = 200;

/// `GET /me` response: who the token belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Me {
    /// The account's name.
    pub account: String,
}

/// `POST /documents` body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateDocument {
    /// Non-blank, at most [`MAX_TITLE_BYTES`], no control characters.
    pub title: String,
}

/// A member's role on one document.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Created the document; may edit and add members.
    Owner,
    /// May edit.
    Editor,
    /// May read and follow live; edits are refused.
    Viewer,
}

impl Role {
    /// The role's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Editor => "editor",
            Role::Viewer => "viewer",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<Role> {
        match name {
            "owner" => Some(Role::Owner),
            "editor" => Some(Role::Editor),
            "viewer" => Some(Role::Viewer),
            _ => None,
        }
    }

    /// Whether this role may change the document's text.
    pub fn can_edit(self) -> bool {
        matches!(self, Role::Owner | Role::Editor)
    }
}

/// A document as its caller sees it (`POST /documents` → 201,
/// `GET /documents/{id}`, entries of `GET /documents`, and the answer to
/// `PATCH /documents/{id}`, `POST /documents/{id}/archive` and
/// `…/unarchive`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DocumentInfo {
    /// Opaque document id.
    pub id: String,
    /// Its title, as given at creation or by the last rename.
    pub title: String,
    /// The document's revision: how many changes have been published (SPEC S3).
    pub revision: i64,
    /// The caller's role on it.
    pub role: Role,
    /// Archived by its owner: members still read it, but nobody changes
    /// it — sync edits, the Planner's writes, Chat and card actions are
    /// refused — until the owner unarchives it.
    pub archived: bool,
    /// When it was created, in milliseconds since the Unix epoch.
    pub created_at: i64,
    /// When its text last changed, in milliseconds since the Unix epoch:
    /// a person's sync edit or the Planner's `edit_plan`. `null` until
    /// the first. The server's own mirror of decision cards is not an
    /// edit, and neither is a rename.
    pub edited_at: Option<i64>,
    /// Who made that change: the account of a person's edit or of an
    /// `edit_plan` called over HTTP, or `planner` for an `edit_plan` a
    /// Planner session called. `null` until the first edit.
    pub edited_by: Option<String>,
}

/// `PATCH /documents/{id}` body: renames the document. Owners and
/// editors may; the title is checked as at creation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameDocument {
    /// Non-blank, at most [`MAX_TITLE_BYTES`], no control characters.
    pub title: String,
}

/// `GET /documents` response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DocumentList {
    /// The caller's documents, the most recently edited first (a document
    /// never edited counts from its creation).
    pub documents: Vec<DocumentInfo>,
}

/// `POST /documents/{id}/members` body. Only the owner may add members.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMember {
    /// The account's name.
    pub account: String,
    /// `editor` or `viewer`; a document has exactly one owner.
    pub role: Role,
}

/// `POST /documents/{id}/members` response, and an entry of
/// [`MemberList`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemberInfo {
    /// The account's name.
    pub account: String,
    /// Its role on the document.
    pub role: Role,
}

/// `GET /documents/{id}/members` response: who the document is shared
/// with. Any member may read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemberList {
    /// The owner first, then every other member by account name.
    pub members: Vec<MemberInfo>,
}

/// One block of an outline (SPEC S4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BlockEntry {
    /// Position, from 0.
    pub index: usize,
    /// Element name: `paragraph`, `heading`, `bulletList`, …
    pub kind: String,
    /// Normalised text.
    pub text: String,
    /// Lower-case hex `blake3` of kind and normalised text.
    pub digest: String,
    /// The block element's item id, `client:clock`.
    pub identity: String,
}

/// `GET /documents/{id}/outline[?revision=N]` response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OutlineView {
    /// The document id.
    pub document: String,
    /// The revision this outline is of.
    pub revision: i64,
    /// Blocks in order.
    pub blocks: Vec<BlockEntry>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::round_trip;
    use pretty_assertions::assert_eq;

    #[test]
    fn document_bodies_round_trip() {
        round_trip(
            CreateDocument {
                title: "Plan".into(),
            },
            r#"{"title":"Plan"}"#,
        );
        round_trip(
            Me {
                account: "ada".into(),
            },
            r#"{"account":"ada"}"#,
        );
        round_trip(
            AddMember {
                account: "bo".into(),
                role: Role::Viewer,
            },
            r#"{"account":"bo","role":"viewer"}"#,
        );
        round_trip(
            MemberInfo {
                account: "bo".into(),
                role: Role::Editor,
            },
            r#"{"account":"bo","role":"editor"}"#,
        );
        round_trip(
            DocumentList {
                documents: vec![DocumentInfo {
                    id: "d".into(),
                    title: "t".into(),
                    revision: 3,
                    role: Role::Owner,
                    archived: true,
                    created_at: 5,
                    edited_at: Some(9),
                    edited_by: Some("bo".into()),
                }],
            },
            r#"{"documents":[{"id":"d","title":"t","revision":3,"role":"owner","archived":true,"created_at":5,"edited_at":9,"edited_by":"bo"}]}"#,
        );
        round_trip(
            MemberList {
                members: vec![
                    MemberInfo {
                        account: "ada".into(),
                        role: Role::Owner,
                    },
                    MemberInfo {
                        account: "bo".into(),
                        role: Role::Viewer,
                    },
                ],
            },
            r#"{"members":[{"account":"ada","role":"owner"},{"account":"bo","role":"viewer"}]}"#,
        );
        round_trip(RenameDocument { title: "Q4".into() }, r#"{"title":"Q4"}"#);
    }

    #[test]
    fn a_document_never_edited_says_so_with_nulls() {
        round_trip(
            DocumentInfo {
                id: "d".into(),
                title: "t".into(),
                revision: 0,
                role: Role::Editor,
                archived: false,
                created_at: 5,
                edited_at: None,
                edited_by: None,
            },
            r#"{"id":"d","title":"t","revision":0,"role":"editor","archived":false,"created_at":5,"edited_at":null,"edited_by":null}"#,
        );
    }

    #[test]
    fn outline_round_trips() {
        round_trip(
            OutlineView {
                document: "d".into(),
                revision: 7,
                blocks: vec![BlockEntry {
                    index: 0,
                    kind: "paragraph".into(),
                    text: "Ship it".into(),
                    digest: "ab12".into(),
                    identity: "42:0".into(),
                }],
            },
            r#"{"document":"d","revision":7,"blocks":[{"index":0,"kind":"paragraph","text":"Ship it","digest":"ab12","identity":"42:0"}]}"#,
        );
    }

    #[test]
    fn unknown_fields_and_roles_are_refused() {
        assert!(serde_json::from_str::<CreateDocument>(r#"{"title":"x","owner":"me"}"#).is_err());
        assert!(serde_json::from_str::<AddMember>(r#"{"account":"x","role":"admin"}"#).is_err());
        assert!(serde_json::from_str::<RenameDocument>(r#"{"title":"x","id":"d"}"#).is_err());
    }

    #[test]
    fn role_names_parse_back() {
        for role in [Role::Owner, Role::Editor, Role::Viewer] {
            assert_eq!(Role::parse(role.as_str()), Some(role));
        }
        assert_eq!(Role::parse("admin"), None);
    }
}
