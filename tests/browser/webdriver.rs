//! A small WebDriver client for the browser tests: Debian's `chromedriver`
//! driving headless Chromium, spoken to over HTTP/1.1 on localhost with the
//! standard library and `serde_json` only (no extra crates, nothing fetched).
//!
//! [`Browser::start`] starts `chromedriver` on a free localhost port and opens
//! one session with a fresh profile; dropping it closes the session and ends
//! that `chromedriver` (and with it the browser). The binaries are
//! `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian packages
//! `chromium` and `chromium-driver`), or `ACTDIFF_CHROMIUM` /
//! `ACTDIFF_CHROMEDRIVER`. When they are missing, [`Browser::start`] panics
//! with a message saying what to install: the tests fail, never pass
//! silently.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The W3C element reference key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Chromium flags for a headless run in a container, offline.
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--window-size=1280,900",
];

/// An element of the current page.
#[derive(Clone, Debug)]
pub struct Element(String);

impl Element {
    fn json(&self) -> Value {
        json!({ ELEMENT: self.0 })
    }
}

/// A running `chromedriver` with one open session.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

fn binary(var: &str, default: &str, package: &str) -> PathBuf {
    let p = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    assert!(
        p.is_file(),
        "{} not found: the browser tests need Debian's `{package}` package \
         (apt-get install chromium chromium-driver), or {var} set to the binary",
        p.display()
    );
    p
}

/// A free localhost TCP port.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free localhost port")
}

/// One HTTP/1.1 exchange with the driver; returns (status, body).
fn http(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        payload.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(payload.as_bytes())?;
    // Read the header, then exactly Content-Length bytes (chromedriver may
    // keep the connection open), or chunks, or to the end.
    let mut raw = Vec::new();
    let mut buf = [0u8; 1 << 16];
    let split = loop {
        if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::other(
                "connection closed before the HTTP header ended",
            ));
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let header = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status: u16 = header
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let length: Option<usize> = header
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok());
    let chunked = header.contains("transfer-encoding: chunked");
    let mut body = raw[split + 4..].to_vec();
    loop {
        let done = match length {
            Some(n) => body.len() >= n,
            None if chunked => body.windows(5).any(|w| w == b"0\r\n\r\n"),
            None => false,
        };
        if done {
            break;
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    if let Some(n) = length {
        body.truncate(n);
    } else if chunked {
        body = dechunk(&body);
    }
    Ok((status, body))
}

/// Decodes a chunked HTTP body.
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&b[..eol])
            .ok()
            .and_then(|l| usize::from_str_radix(l.split(';').next().unwrap_or("").trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        out.extend_from_slice(&b[start..(start + size).min(b.len())]);
        b = &b[(start + size + 2).min(b.len())..];
    }
    out
}

impl Browser {
    /// Starts `chromedriver` and a headless Chromium session with a fresh
    /// profile; browser console and performance (network) logs are recorded.
    pub fn start() -> Browser {
        let chromium = binary("ACTDIFF_CHROMIUM", "/usr/bin/chromium", "chromium");
        let chromedriver = binary(
            "ACTDIFF_CHROMEDRIVER",
            "/usr/bin/chromedriver",
            "chromium-driver",
        );
        let profile = tempfile::tempdir().unwrap();
        // A port can be taken between the probe and chromedriver's bind: retry.
        for attempt in 0..5 {
            let port = free_port();
            let log = profile.path().join(format!("chromedriver-{attempt}.log"));
            let mut driver = Command::new(&chromedriver)
                .arg(format!("--port={port}"))
                .arg(format!("--log-path={}", log.display()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("{}: {e}", chromedriver.display()));
            let t0 = Instant::now();
            let mut ready = false;
            while t0.elapsed() < Duration::from_secs(30) {
                if let Ok((200, body)) = http(port, "GET", "/status", None) {
                    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    if v["value"]["ready"] == true {
                        ready = true;
                        break;
                    }
                }
                if let Ok(Some(_)) = driver.try_wait() {
                    break; // exited: port taken?
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if !ready {
                let _ = driver.kill();
                let _ = driver.wait();
                continue;
            }
            let mut b = Browser {
                driver,
                port,
                session: String::new(),
                _profile: profile,
            };
            let mut args: Vec<String> = FLAGS.iter().map(|s| s.to_string()).collect();
            args.push(format!(
                "--user-data-dir={}",
                b._profile.path().join("profile").display()
            ));
            let caps = json!({
                "capabilities": {
                    "alwaysMatch": {
                        "browserName": "chrome",
                        "pageLoadStrategy": "normal",
                        "goog:chromeOptions": {
                            "binary": chromium.display().to_string(),
                            "args": args,
                        },
                        "goog:loggingPrefs": { "browser": "ALL", "performance": "ALL" },
                    }
                }
            });
            let v = b
                .call("POST", "/session", Some(&caps))
                .unwrap_or_else(|e| panic!("starting {}: {e}", chromium.display()));
            b.session = v["sessionId"].as_str().expect("a session id").to_string();
            // Start from a blank page with empty logs (the browser's own
            // start-up page is not ours).
            b.goto("about:blank");
            b.log("browser");
            b.log("performance");
            return b;
        }
        panic!("chromedriver did not start on a free port (5 attempts)");
    }

    /// A WebDriver command; returns its `value`, or the error message.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let (status, raw) = http(self.port, method, path, body).map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_slice(&raw)
            .map_err(|e| format!("{method} {path}: HTTP {status}, bad JSON: {e}"))?;
        let value = v["value"].clone();
        if status != 200 || value.get("error").is_some() {
            return Err(format!(
                "{method} {path}: HTTP {status}: {} {}",
                value["error"].as_str().unwrap_or(""),
                value["message"].as_str().unwrap_or("")
            ));
        }
        Ok(value)
    }

    /// A command of the session; panics on a WebDriver error.
    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let p = format!("/session/{}{path}", self.session);
        self.call(method, &p, body.as_ref())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Navigates to `url` and waits for the page's load event.
    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    /// Navigates to a local file.
    pub fn open(&self, path: &Path) {
        self.goto(&file_url(path));
    }

    /// The current URL.
    pub fn url(&self) -> String {
        self.cmd("GET", "/url", None)
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) and returns its result.
    pub fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// The first element matching a CSS selector.
    pub fn find(&self, css: &str) -> Element {
        let v = self.cmd(
            "POST",
            "/element",
            Some(json!({ "using": "css selector", "value": css })),
        );
        Element(
            v[ELEMENT]
                .as_str()
                .expect("an element reference")
                .to_string(),
        )
    }

    /// Every element matching a CSS selector.
    pub fn find_all(&self, css: &str) -> Vec<Element> {
        let v = self.cmd(
            "POST",
            "/elements",
            Some(json!({ "using": "css selector", "value": css })),
        );
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| Element(e[ELEMENT].as_str().unwrap().to_string()))
            .collect()
    }

    /// Clicks an element (scrolling it into view first).
    pub fn click(&self, e: &Element) {
        self.cmd("POST", &format!("/element/{}/click", e.0), Some(json!({})));
    }

    /// Types `text` into an element (`\u{E007}` is Enter).
    pub fn type_into(&self, e: &Element, text: &str) {
        self.cmd(
            "POST",
            &format!("/element/{}/value", e.0),
            Some(json!({ "text": text })),
        );
    }

    /// Clears an input element.
    pub fn clear(&self, e: &Element) {
        self.cmd("POST", &format!("/element/{}/clear", e.0), Some(json!({})));
    }

    /// Moves the mouse onto the middle of an element.
    pub fn hover(&self, e: &Element) {
        self.cmd(
            "POST",
            "/actions",
            Some(json!({ "actions": [{
                "type": "pointer",
                "id": "mouse",
                "parameters": { "pointerType": "mouse" },
                "actions": [{ "type": "pointerMove", "duration": 0, "origin": e.json(), "x": 0, "y": 0 }]
            }]})),
        );
        self.cmd("DELETE", "/actions", None);
    }

    /// The element as a script argument.
    pub fn arg(&self, e: &Element) -> Value {
        e.json()
    }

    /// Saves a PNG screenshot of the viewport.
    pub fn screenshot(&self, path: &Path) {
        let v = self.cmd("GET", "/screenshot", None);
        let png = base64_decode(v.as_str().expect("base64 PNG"));
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }

    /// Resizes the window.
    pub fn window_size(&self, width: u32, height: u32) {
        self.cmd(
            "POST",
            "/window/rect",
            Some(json!({ "width": width, "height": height })),
        );
    }

    /// Sends a Chrome DevTools command through chromedriver.
    pub fn cdp(&self, cmd: &str, params: Value) -> Value {
        self.cmd(
            "POST",
            "/goog/cdp/execute",
            Some(json!({ "cmd": cmd, "params": params })),
        )
    }

    /// Makes pages see `prefers-color-scheme: dark` (or light).
    pub fn color_scheme(&self, scheme: &str) {
        self.cdp(
            "Emulation.setEmulatedMedia",
            json!({ "features": [{ "name": "prefers-color-scheme", "value": scheme }] }),
        );
    }

    /// Log entries of `kind` (`browser`: console and load errors;
    /// `performance`: DevTools events) since the last call.
    pub fn log(&self, kind: &str) -> Vec<Value> {
        self.cmd("POST", "/se/log", Some(json!({ "type": kind })))
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until `script` returns something truthy (at most `secs`);
    /// returns the last value.
    pub fn wait_for(&self, script: &str, secs: u64) -> Value {
        let t0 = Instant::now();
        loop {
            let v = self.js(script, vec![]);
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy || t0.elapsed() > Duration::from_secs(secs) {
                return v;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.call("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// `file://` URL of a local path.
pub fn file_url(path: &Path) -> String {
    let abs = std::fs::canonicalize(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut url = String::from("file://");
    for b in abs.to_string_lossy().bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                url.push(b as char)
            }
            _ => url.push_str(&format!("%{b:02X}")),
        }
    }
    url
}

/// Standard base64 (with padding), as WebDriver screenshots are encoded.
fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let Some(v) = val(c) else { continue };
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

#[test]
fn base64_and_chunks() {
    assert_eq!(base64_decode("aGVsbG8="), b"hello");
    assert_eq!(base64_decode("aGk="), b"hi");
    assert_eq!(dechunk(b"5\r\nhello\r\n1\r\n!\r\n0\r\n\r\n"), b"hello!");
}
