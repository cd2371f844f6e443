//! Headless Chromium driven over the W3C WebDriver protocol through
//! Debian's chromedriver, with a small client on reqwest (loopback only:
//! no TLS stack is needed, so none is built). Where Chromium is not
//! installed the tests that need it skip with the reason printed, except
//! under `CI=true`, where `.ci/run` installs it and they are mandatory.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The key of an element reference in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A browser session; the driver is stopped when it is dropped.
pub struct Browser {
    http: reqwest::Client,
    session: String,
    driver: Child,
}

impl Drop for Browser {
    /// Stops chromedriver and the Chromium it started (its process group:
    /// a test that fails half way leaves no browser behind).
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.driver.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A page element.
pub struct Element(String);

impl Browser {
    /// Starts chromedriver and a headless Chromium; `None` (with the reason
    /// printed) where they are not installed, except under `CI=true`.
    pub async fn start() -> Option<Self> {
        let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
            .into_iter()
            .filter(|p| !std::path::Path::new(p).exists())
            .collect();
        if !missing.is_empty() {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!(
                    "{missing:?} missing: browser tests are mandatory under CI=true (.ci/run installs chromium and chromium-driver)"
                );
            }
            eprintln!(
                "skipping: {missing:?} not installed (apt-get install chromium chromium-driver)"
            );
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let http = switchboard::http::client::client();
        let driver = Command::new(CHROMEDRIVER)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let base = format!("http://127.0.0.1:{port}");
        for _ in 0..100 {
            if http.get(format!("{base}/status")).send().await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut browser = Self {
            http,
            session: base.clone(),
            driver,
        };
        let created = browser
            .call(
                reqwest::Method::POST,
                &format!("{base}/session"),
                json!({"capabilities": {"alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": CHROMIUM,
                        "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                                 "--disable-dev-shm-usage", "--window-size=1280,1400"],
                    },
                    "goog:loggingPrefs": {"browser": "ALL"},
                }}}),
            )
            .await;
        let id = created["sessionId"]
            .as_str()
            .expect("a session")
            .to_string();
        browser.session = format!("{base}/session/{id}");
        Some(browser)
    }

    async fn call(&self, method: reqwest::Method, url: &str, body: Value) -> Value {
        let request = self.http.request(method.clone(), url);
        let request = if method == reqwest::Method::GET {
            request
        } else {
            request.json(&body)
        };
        let answer: Value = request
            .send()
            .await
            .expect("chromedriver answers")
            .json()
            .await
            .expect("chromedriver answers JSON");
        if let Some(error) = answer["value"].get("error") {
            panic!("webdriver {url}: {error} {}", answer["value"]["message"]);
        }
        answer["value"].clone()
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.call(
            reqwest::Method::POST,
            &format!("{}{path}", self.session),
            body,
        )
        .await
    }

    async fn get(&self, path: &str) -> Value {
        self.call(
            reqwest::Method::GET,
            &format!("{}{path}", self.session),
            Value::Null,
        )
        .await
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({"url": url})).await;
    }

    /// The address shown.
    pub async fn url(&self) -> String {
        self.get("/url")
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The page's HTML.
    pub async fn source(&self) -> String {
        self.get("/source")
            .await
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The page's HTML once it contains `text` (a form's answer may still
    /// be loading when a click returns); fails the test after 10 s.
    pub async fn source_with(&self, text: &str) -> String {
        for _ in 0..200 {
            let html = self.source().await;
            if html.contains(text) {
                return html;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the page never showed {text:?}: {}", self.source().await);
    }

    /// The first element matching CSS `selector`.
    pub async fn find(&self, selector: &str) -> Element {
        let found = self
            .post(
                "/element",
                json!({"using": "css selector", "value": selector}),
            )
            .await;
        match found[ELEMENT].as_str() {
            Some(id) => Element(id.to_string()),
            None => panic!("no element {selector}: {found}"),
        }
    }

    /// Types `text` into `element`.
    pub async fn type_into(&self, element: &Element, text: &str) {
        self.post(
            &format!("/element/{}/value", element.0),
            json!({"text": text}),
        )
        .await;
    }

    /// Clicks `element`.
    pub async fn click(&self, element: &Element) {
        self.post(&format!("/element/{}/click", element.0), json!({}))
            .await;
    }

    /// A PNG of the viewport, saved as `path`.
    pub async fn screenshot(&self, path: &std::path::Path) {
        use base64::Engine as _;
        let png = self.get("/screenshot").await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap_or_default())
            .expect("a base64 PNG");
        std::fs::write(path, bytes).unwrap();
    }

    /// The browser console's entries since the last call, as
    /// `(level, message)`.
    pub async fn console(&self) -> Vec<(String, String)> {
        self.post("/se/log", json!({"type": "browser"}))
            .await
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|e| {
                (
                    e["level"].as_str().unwrap_or_default().to_string(),
                    e["message"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// Ends the session (the driver stops with the value).
    pub async fn close(self) {
        let _ = self.http.delete(&self.session).send().await;
    }
}
