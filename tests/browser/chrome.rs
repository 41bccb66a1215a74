//! Headless Chromium for the browser tests, driven over the DevTools
//! protocol by the `headless_chrome` crate (it starts Chromium itself; no
//! chromedriver). This file only adapts that crate to what the tests do:
//! open a file, run a script, click, type, hover, take a screenshot, and
//! collect console errors and network requests.
//!
//! [`Browser::start`] starts `/usr/bin/chromium` (Debian's `chromium`
//! package; `scripts/test.sh` installs it), or the binary `ACTDIFF_CHROMIUM`
//! names, with a fresh profile; dropping it ends the browser. Without the
//! binary it panics saying what to install: the tests fail, never pass
//! silently.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use headless_chrome::browser::tab::{NoElementFound, Tab};
use headless_chrome::protocol::cdp::types::Event;
use headless_chrome::protocol::cdp::{Emulation, Network, Page, Runtime};
use headless_chrome::{Browser as Chromium, LaunchOptions};
use serde_json::Value;

pub use headless_chrome::Element;

/// Chromium flags besides the crate's defaults (headless, no sandbox):
/// offline, in a container, a 1280 × 900 window without scrollbars.
const FLAGS: &[&str] = &[
    "--disable-gpu",
    "--disable-component-update",
    "--hide-scrollbars",
];

/// What the page did since it was last asked ([`Browser::console_errors`],
/// [`Browser::requests`]).
#[derive(Default)]
struct Seen {
    errors: Vec<String>,
    requests: Vec<String>,
}

/// A headless Chromium with one tab.
pub struct Browser {
    tab: Arc<Tab>,
    seen: Arc<Mutex<Seen>>,
    _chromium: Chromium,
    _profile: tempfile::TempDir,
}

fn chromium_binary() -> PathBuf {
    let p = std::env::var_os("ACTDIFF_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        p.is_file(),
        "{} not found: the browser tests need Chromium (Debian: apt-get install \
         chromium; scripts/test.sh installs it), or ACTDIFF_CHROMIUM set to the binary",
        p.display()
    );
    p
}

impl Browser {
    /// Starts headless Chromium with a fresh profile, recording console
    /// errors and network requests.
    pub fn start() -> Browser {
        let path = chromium_binary();
        let profile = tempfile::tempdir().unwrap();
        let options = LaunchOptions::default_builder()
            .path(Some(path.clone()))
            .headless(true)
            .sandbox(false)
            .window_size(Some((1280, 900)))
            .user_data_dir(Some(profile.path().join("profile")))
            .args(FLAGS.iter().map(OsStr::new).collect())
            .idle_browser_timeout(Duration::from_secs(600))
            .build()
            .unwrap();
        let chromium =
            Chromium::new(options).unwrap_or_else(|e| panic!("starting {}: {e}", path.display()));
        let tab = chromium
            .new_tab()
            .unwrap_or_else(|e| panic!("{}: no tab: {e}", path.display()));
        tab.set_default_timeout(Duration::from_secs(60));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let sink = Arc::clone(&seen);
        tab.add_event_listener(Arc::new(move |event: &Event| {
            let mut s = sink.lock().unwrap();
            match event {
                // Script errors and failed loads (what chromedriver logs as
                // SEVERE): uncaught exceptions, console.error, and error
                // entries of the browser's log.
                Event::RuntimeExceptionThrown(e) => {
                    s.errors.push(format!("exception: {}", to_json(&e.params)))
                }
                Event::RuntimeConsoleAPICalled(e) => {
                    let v = to_json(&e.params);
                    if v["type"] == "error" || v["type"] == "assert" {
                        let kind = v["type"].as_str().unwrap_or("");
                        s.errors.push(format!("console.{kind}: {}", v["args"]));
                    }
                }
                Event::LogEntryAdded(e) => {
                    let v = to_json(&e.params);
                    if v["entry"]["level"] == "error" {
                        s.errors.push(format!("log: {}", v["entry"]));
                    }
                }
                Event::NetworkRequestWillBeSent(e) => {
                    let v = to_json(&e.params);
                    s.requests
                        .push(v["request"]["url"].as_str().unwrap_or("").to_string());
                }
                _ => {}
            }
        }))
        .unwrap();
        tab.enable_runtime().unwrap();
        tab.enable_log().unwrap();
        tab.call_method(Network::Enable {
            max_total_buffer_size: None,
            max_resource_buffer_size: None,
            max_post_data_size: None,
            report_direct_socket_traffic: None,
            enable_durable_messages: None,
        })
        .unwrap();
        let b = Browser {
            tab,
            seen,
            _chromium: chromium,
            _profile: profile,
        };
        // Start from a blank page with nothing seen (the browser's own
        // start-up page is not ours).
        b.goto("about:blank");
        b.console_errors();
        b.requests();
        b
    }

    /// Navigates to `url` and waits for the new page's load event.
    pub fn goto(&self, url: &str) {
        let _ = self.try_js("window.__actdiff_leaving = true", vec![]);
        self.tab
            .navigate_to(url)
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        self.wait_for_new_page(url);
    }

    /// Navigates to a local file.
    pub fn open(&self, path: &Path) {
        self.goto(&file_url(path));
    }

    /// Waits until the page marked by `__actdiff_leaving` is gone and the
    /// new one has loaded.
    fn wait_for_new_page(&self, what: &str) {
        let t0 = Instant::now();
        loop {
            let done = self.try_js(
                "return window.__actdiff_leaving === undefined && document.readyState === 'complete'",
                vec![],
            );
            if done == Ok(Value::Bool(true)) {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "{what}: no page loaded in 60 s ({done:?})"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The current URL.
    pub fn url(&self) -> String {
        self.js("return location.href", vec![])
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) and
    /// returns its result.
    pub fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.try_js(script, args)
            .unwrap_or_else(|e| panic!("{e}\nin the script:\n{script}"))
    }

    fn try_js(&self, script: &str, args: Vec<Value>) -> Result<Value, String> {
        let expression = format!(
            "(function() {{ {script}\n}}).apply(null, {})",
            Value::Array(args)
        );
        let r = self
            .tab
            .call_method(Runtime::Evaluate {
                expression,
                return_by_value: Some(true),
                await_promise: Some(false),
                object_group: None,
                include_command_line_api: None,
                silent: None,
                context_id: None,
                generate_preview: None,
                user_gesture: None,
                throw_on_side_effect: None,
                timeout: None,
                disable_breaks: None,
                repl_mode: None,
                allow_unsafe_eval_blocked_by_csp: None,
                unique_context_id: None,
                serialization_options: None,
            })
            .map_err(|e| e.to_string())?;
        if let Some(x) = r.exception_details {
            return Err(format!("script error: {x:?}"));
        }
        Ok(r.result.value.unwrap_or(Value::Null))
    }

    /// Runs `script` (a function body) with `this` the element.
    pub fn js_on(&self, e: &Element, script: &str) -> Value {
        let r = e
            .call_js_fn(&format!("function() {{ {script}\n}}"), vec![], false)
            .unwrap_or_else(|err| panic!("{err}\nin the script:\n{script}"));
        match r.value {
            Some(v) => v,
            None if r.Type == Runtime::RemoteObjectType::Undefined => Value::Null,
            None => panic!("not a plain value: {r:?}\nfrom the script:\n{script}"),
        }
    }

    /// The first element matching a CSS selector.
    pub fn find(&self, css: &str) -> Element<'_> {
        self.tab
            .find_element(css)
            .unwrap_or_else(|e| panic!("{css}: {e}"))
    }

    /// Every element matching a CSS selector (none: empty).
    pub fn find_all(&self, css: &str) -> Vec<Element<'_>> {
        match self.tab.find_elements(css) {
            Ok(v) => v,
            // The crate answers "no element found" for none.
            Err(e) if e.downcast_ref::<NoElementFound>().is_some() => Vec::new(),
            Err(e) => panic!("{css}: {e}"),
        }
    }

    /// Clicks an element as a user would (scrolled into view, the mouse on
    /// its middle); an `<option>` is chosen in its list. A click on a link
    /// to another page waits for that page's load event.
    pub fn click(&self, e: &Element) {
        let kind = self.js_on(
            e,
            "if (this.tagName === 'OPTION') return 'option';
             const a = this.closest('a');
             const h = a && (a.getAttribute('href') ||
                             a.getAttributeNS('http://www.w3.org/1999/xlink', 'href'));
             if (h && new URL(h, location.href).href.split('#')[0] !== location.href.split('#')[0]) {
               window.__actdiff_leaving = true; return 'leave';
             }
             return '';",
        );
        if kind == "option" {
            self.js_on(
                e,
                "const s = this.closest('select'); this.selected = true;
                 if (s) { s.dispatchEvent(new Event('input', {bubbles: true}));
                          s.dispatchEvent(new Event('change', {bubbles: true})); }",
            );
            return;
        }
        e.click().unwrap_or_else(|err| panic!("click: {err}"));
        if kind == "leave" {
            self.wait_for_new_page("click on a link");
        }
    }

    /// Types `text` into an element (focused first); `\u{E007}` is Enter.
    pub fn type_into(&self, e: &Element, text: &str) {
        e.focus().unwrap_or_else(|err| panic!("focus: {err}"));
        for (i, part) in text.split('\u{E007}').enumerate() {
            if i > 0 {
                self.tab.press_key("Enter").unwrap();
            }
            if !part.is_empty() {
                self.tab.send_character(part).unwrap();
            }
        }
    }

    /// Clears an input element.
    pub fn clear(&self, e: &Element) {
        self.js_on(
            e,
            "this.value = ''; this.dispatchEvent(new Event('input', {bubbles: true}));
             this.dispatchEvent(new Event('change', {bubbles: true}));",
        );
    }

    /// Moves the mouse onto the middle of an element.
    pub fn hover(&self, e: &Element) {
        e.move_mouse_over()
            .unwrap_or_else(|err| panic!("hover: {err}"));
    }

    /// Saves a PNG screenshot of the viewport.
    pub fn screenshot(&self, path: &Path) {
        let png = self
            .tab
            .capture_screenshot(Page::CaptureScreenshotFormatOption::Png, None, None, true)
            .unwrap_or_else(|e| panic!("screenshot: {e}"));
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }

    /// Resizes the viewport.
    pub fn window_size(&self, width: u32, height: u32) {
        self.tab
            .call_method(Emulation::SetDeviceMetricsOverride {
                width,
                height,
                device_scale_factor: 1.0,
                mobile: false,
                scale: None,
                screen_width: None,
                screen_height: None,
                position_x: None,
                position_y: None,
                dont_set_visible_size: None,
                screen_orientation: None,
                viewport: None,
                display_feature: None,
                device_posture: None,
            })
            .unwrap_or_else(|e| panic!("window size: {e}"));
    }

    /// Makes pages see `prefers-color-scheme: dark` (or light).
    pub fn color_scheme(&self, scheme: &str) {
        self.tab
            .call_method(Emulation::SetEmulatedMedia {
                media: None,
                features: Some(vec![Emulation::MediaFeature {
                    name: "prefers-color-scheme".into(),
                    value: scheme.into(),
                }]),
            })
            .unwrap_or_else(|e| panic!("colour scheme: {e}"));
    }

    /// Script errors and failed loads since the last call.
    pub fn console_errors(&self) -> Vec<String> {
        std::mem::take(&mut self.seen.lock().unwrap().errors)
    }

    /// URLs of the requests sent since the last call.
    pub fn requests(&self) -> Vec<String> {
        std::mem::take(&mut self.seen.lock().unwrap().requests)
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

/// Event parameters as JSON.
fn to_json(params: &impl serde::Serialize) -> Value {
    serde_json::to_value(params).unwrap_or(Value::Null)
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
