//! A Margin server running inside the test process, so tests can call the
//! Planner tools on the same hub that serves HTTP and sync.

use margin_server::serve::{start, Running, ServeOptions};
use margin_server::storage::{Account, Store};
use margin_server::tools::Tools;

use super::{Api, TestDb};

pub struct InProcess {
    running: Option<Running>,
    url: String,
    options: ServeOptions,
    api: Api,
}

impl InProcess {
    pub async fn start(db: &TestDb) -> InProcess {
        Self::start_with(db, |_| {}).await
    }

    /// Starts with options adjusted by `adjust` (kept across restarts).
    pub async fn start_with(db: &TestDb, adjust: impl FnOnce(&mut ServeOptions)) -> InProcess {
        let url = db.url();
        let mut options = ServeOptions::new("127.0.0.1:0".parse().unwrap());
        adjust(&mut options);
        let running = Self::run(&url, options.clone()).await;
        let api = Api::new(running.addr);
        InProcess {
            running: Some(running),
            url,
            options,
            api,
        }
    }

    async fn run(url: &str, options: ServeOptions) -> Running {
        let store = Store::open(url).await.unwrap();
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
        let running = Self::run(&self.url, self.options.clone()).await;
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
