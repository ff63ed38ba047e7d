//! Headless Chromium driven through the DevTools protocol over its WebSocket: navigate, evaluate, type, resize and take screenshots.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// A headless Chromium with one page, killed on drop.
pub struct Browser {
    child: Child,
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts Debian's `chromium` with a fresh profile and connects to its first page.
    pub async fn start() -> Self {
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-port=0",
                "--window-size=1280,800",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium is installed (.ci/run installs Debian's chromium package)");
        let port = devtools_port(profile.path()).await;
        let socket = page_socket(port).await;
        Self {
            child,
            socket,
            next_id: 0,
            _profile: profile,
        }
    }

    /// Sends one DevTools command and waits for its result (events in between are skipped).
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let command = json!({"id": id, "method": method, "params": params});
        self.socket
            .send(Message::Text(command.to_string().into()))
            .await
            .unwrap();
        loop {
            let message = tokio::time::timeout(Duration::from_secs(30), self.socket.next())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method}"))
                .expect("the DevTools socket is open")
                .unwrap();
            let Message::Text(text) = message else {
                continue;
            };
            let reply: Value = serde_json::from_str(&text).unwrap();
            if reply["id"] == id {
                assert!(reply["error"].is_null(), "{method}: {reply}");
                return reply["result"].clone();
            }
        }
    }

    pub async fn navigate(&mut self, url: &str) {
        self.call("Page.enable", json!({})).await;
        self.call("Page.navigate", json!({"url": url})).await;
    }

    /// The value of a JavaScript expression in the page.
    pub async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
            )
            .await;
        assert!(
            result["exceptionDetails"].is_null(),
            "{expression}: {result}"
        );
        result["result"]["value"].clone()
    }

    /// Waits until `expression` is true in the page (an expression that throws, say while the
    /// page loads, counts as false).
    pub async fn wait_for(&mut self, what: &str, expression: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        let guarded = format!(
            "(() => {{ try {{ return ({expression}); }} catch (e) {{ return false; }} }})()"
        );
        loop {
            if self.eval(&guarded).await == Value::Bool(true) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Types `text` into the element `selector` as a user would (focus, then key input).
    pub async fn type_into(&mut self, selector: &str, text: &str) {
        let focus = format!("document.querySelector({selector:?}).focus(); true");
        assert_eq!(self.eval(&focus).await, Value::Bool(true));
        self.call("Input.insertText", json!({"text": text})).await;
    }

    /// Emulates a viewport of `width` × `height` CSS pixels (`mobile` for a phone).
    pub async fn viewport(&mut self, width: u32, height: u32, mobile: bool) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}),
        )
        .await;
    }

    /// Saves a PNG of the viewport to `path`.
    pub async fn screenshot(&mut self, path: &Path) {
        use base64::Engine as _;
        let shot = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The port Chromium chose, from the `DevToolsActivePort` file in its profile.
async fn devtools_port(profile: &Path) -> u16 {
    let file = profile.join("DevToolsActivePort");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(port) = std::fs::read_to_string(&file)
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse().ok())
        {
            return port;
        }
        assert!(Instant::now() < deadline, "chromium did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The WebSocket of the browser's first page, from `/json/list`.
async fn page_socket(port: u16) -> WebSocketStream<MaybeTlsStream<TcpStream>> {
    let client = sluice_testkit::http_client();
    // Chromium names the page's socket after the Host header: give it the port too.
    let host = format!("127.0.0.1:{port}");
    let list = sluice_testkit::get(&client, &format!("http://{host}/json/list"), &host)
        .await
        .unwrap();
    let targets: Value = serde_json::from_str(&list.body).unwrap();
    let url = targets
        .as_array()
        .unwrap()
        .iter()
        .find(|target| target["type"] == "page")
        .and_then(|target| target["webSocketDebuggerUrl"].as_str())
        .expect("a page target")
        .to_owned();
    let (socket, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    socket
}
