//! A Margin server running inside the test process, so tests can call the
//! Planner tools on the same hub that serves HTTP and sync.

use std::net::SocketAddr;

use margin_server::serve::{start, Running, ServeOptions};
use margin_server::storage::{Account, Store};
use margin_server::sync::HubSettings;
use margin_server::tools::Tools;

use super::{Api, TestDb};

pub struct InProcess {
    running: Option<Running>,
    url: String,
    api: Api,
}

impl InProcess {
    pub async fn start(db: &TestDb) -> InProcess {
        Self::start_with(db, HubSettings::default()).await
    }

    pub async fn start_with(db: &TestDb, settings: HubSettings) -> InProcess {
        let url = db.url();
        let running = Self::run(&url, settings).await;
        let api = Api::new(running.addr);
        InProcess {
            running: Some(running),
            url,
            api,
        }
    }

    async fn run(url: &str, settings: HubSettings) -> Running {
        let store = Store::open(url).await.unwrap();
        let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut options = ServeOptions::new(listen);
        options.hub = settings;
        start(store, options).await.unwrap()
    }

    fn running(&self) -> &Running {
        self.running.as_ref().expect("server is running")
    }

    pub fn tools(&self) -> Tools {
        Tools::new(self.running().hub.clone())
    }

    pub fn store(&self) -> &Store {
        self.running().hub.store()
    }

    /// Creates an account and returns it with a token.
    pub async fn account(&self, name: &str) -> (Account, String) {
        let account = self.store().create_account(name).await.unwrap();
        let token = margin_server::auth::issue_token(self.store(), &account)
            .await
            .unwrap();
        (account, token)
    }

    /// A graceful restart: every remembered read is lost; storage stays.
    pub async fn restart(&mut self) {
        if let Some(running) = self.running.take() {
            running.stop().await.unwrap();
        }
        let running = Self::run(&self.url, HubSettings::default()).await;
        self.api = Api::new(running.addr);
        self.running = Some(running);
    }
}

impl std::ops::Deref for InProcess {
    type Target = Api;

    fn deref(&self) -> &Api {
        &self.api
    }
}
