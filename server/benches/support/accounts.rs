//! Bench accounts written straight into a store before any server runs on
//! it, the way `margin account add`, `machine pair` and a new document do,
//! without a process (or an HTTP round trip) per account.

use std::path::Path;

use futures_util::StreamExt;
use margin_server::auth;
use margin_server::storage::{Account, Store};

/// One account: its token, and its paired machine's credential and its
/// document when asked for.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub(crate) account: Account,
    pub(crate) token: String,
    pub(crate) credential: Option<String>,
    pub(crate) document: Option<String>,
}

/// What to make for one account.
pub(crate) struct Wanted {
    pub(crate) name: String,
    /// The paired machine's name, when it should have one.
    pub(crate) machine: Option<String>,
    /// The document's title, when it should have one.
    pub(crate) document: Option<String>,
}

/// How long the benches' machine credentials open links: longer than a
/// seeding takes (the restart bench's 100× makes 100,000 sessions over
/// links, over half an hour), where the server's own lifetime is 15
/// minutes and a credential's clock starts when it is paired.
const CREDENTIAL_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);

/// Makes one account as `wanted` says.
pub(crate) async fn member(store: &Store, wanted: Wanted) -> Member {
    let name = &wanted.name;
    let account = store
        .create_account(name)
        .await
        .unwrap_or_else(|e| panic!("creating account {name}: {e}"));
    let token = auth::issue_token(store, &account)
        .await
        .unwrap_or_else(|e| panic!("issuing a token for {name}: {e}"));
    let credential = match &wanted.machine {
        Some(machine) => {
            let (_, credential) = auth::pair_machine(store, &account, machine, CREDENTIAL_TTL)
                .await
                .unwrap_or_else(|e| panic!("pairing a machine to {name}: {e}"));
            Some(credential.secret)
        }
        None => None,
    };
    let document = match &wanted.document {
        Some(title) => Some(
            store
                .create_document(&account, title)
                .await
                .unwrap_or_else(|e| panic!("creating a document for {name}: {e}"))
                .id,
        ),
        None => None,
    };
    Member {
        account,
        token,
        credential,
        document,
    }
}

/// An account with a token and, when `document` names one, a document:
/// the owner of a bench's documents, with no machine.
pub(crate) async fn owner(store: &Store, name: &str, document: Option<&str>) -> Member {
    member(
        store,
        Wanted {
            name: name.into(),
            machine: None,
            document: document.map(Into::into),
        },
    )
    .await
}

/// `count` accounts named `{prefix}{i:05}`, each with a token, a paired
/// machine and a document, written to the SQLite store in `data` before
/// any server runs on it: a Planner's setting, one account a machine (a
/// document's Planner binds to its owner's machine).
pub(crate) async fn planners(data: &Path, prefix: &str, count: usize) -> Vec<Member> {
    members(data, count, |i| {
        let name = format!("{prefix}{i:05}");
        Wanted {
            machine: Some(format!("{name} laptop")),
            document: Some(format!("{name}'s plan")),
            name,
        }
    })
    .await
}

/// Makes `count` accounts (`wanted(i)` for the `i`th, a few at a time) in
/// the SQLite store in `data`, and closes it so a server can open it.
async fn members(data: &Path, count: usize, wanted: impl Fn(usize) -> Wanted) -> Vec<Member> {
    let url = Store::sqlite_url_in(data).expect("cannot create the bench's data folder");
    let store = Store::open(&url)
        .await
        .unwrap_or_else(|e| panic!("cannot open the bench store at {url}: {e}"));
    let members = futures_util::stream::iter((0..count).map(wanted))
        .map(|w| {
            let store = store.clone();
            async move { member(&store, w).await }
        })
        .buffered(8)
        .collect::<Vec<_>>()
        .await;
    store.close().await;
    members
}
