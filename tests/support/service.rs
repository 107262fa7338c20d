//! `walfill serve` processes run by the tests: started in the background
//! with their log kept, signalled, killed, and asked over HTTP.

use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use super::{TestDb, Walfill};

/// A running `walfill serve`.
pub struct Service {
    child: Option<Child>,
    log: PathBuf,
    /// Its HTTP address, when it listens.
    pub addr: Option<String>,
}

/// A free TCP port on the loopback interface.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Service {
    /// Starts `walfill serve` (with `--listen` on a free port when `http`),
    /// with extra environment `env`.
    pub fn start(walfill: &Walfill, http: bool, env: &[(&str, &str)]) -> Service {
        let addr = http.then(|| format!("127.0.0.1:{}", free_port()));
        let mut args = vec!["serve"];
        if let Some(a) = &addr {
            args.extend(["--listen", a]);
        }
        let log = std::env::temp_dir().join(format!(
            "walfill-serve-{}-{}.log",
            std::process::id(),
            free_port()
        ));
        let file = std::fs::File::create(&log).expect("log file");
        let child = walfill
            .command_env(&args, env)
            .stdout(std::process::Stdio::null())
            .stderr(file)
            .spawn()
            .expect("spawn walfill serve");
        let service = Service {
            child: Some(child),
            log,
            addr,
        };
        if http {
            service.wait_http();
        }
        service
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends signal `name` (HUP, TERM, KILL).
    pub fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .args([&format!("-{name}"), &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Kills it with SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops it with SIGTERM and insists it exits 0 within `timeout`.
    pub fn stop(&mut self, timeout: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        self.signal_pid(child.id(), "TERM");
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                assert!(
                    status.success(),
                    "walfill serve exited with {status}:\n{}",
                    self.log()
                );
                return;
            }
            if started.elapsed() > timeout {
                let _ = child.kill();
                panic!(
                    "walfill serve did not stop within {timeout:?}:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn signal_pid(&self, pid: u32, name: &str) {
        let _ = std::process::Command::new("kill")
            .args([&format!("-{name}"), &pid.to_string()])
            .status();
    }

    fn url(&self, path: &str) -> String {
        format!(
            "http://{}{path}",
            self.addr.as_deref().expect("an HTTP service")
        )
    }

    fn wait_http(&self) {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if reqwest::blocking::get(self.url("/health")).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("walfill serve did not answer HTTP:\n{}", self.log());
    }

    /// GET `path`: status code and body.
    pub fn get(&self, path: &str) -> (u16, String) {
        let response = reqwest::blocking::get(self.url(path)).expect("GET");
        let code = response.status().as_u16();
        (code, response.text().unwrap_or_default())
    }

    /// `method` `path` with `Authorization: Bearer token` when given:
    /// status code and body.
    pub fn call(&self, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
        let client = reqwest::blocking::Client::new();
        let mut request = match method {
            "POST" => client.post(self.url(path)),
            _ => client.get(self.url(path)),
        };
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().expect("HTTP request");
        let code = response.status().as_u16();
        (code, response.text().unwrap_or_default())
    }

    /// POST `path`: status code and body.
    pub fn post(&self, path: &str) -> (u16, String) {
        let response = reqwest::blocking::Client::new()
            .post(self.url(path))
            .send()
            .expect("POST");
        let code = response.status().as_u16();
        (code, response.text().unwrap_or_default())
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            if std::thread::panicking() {
                eprintln!("walfill serve's log:\n{}", self.log());
            }
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A walfill command left running in the background (a `sync`), its output
/// discarded; stopped with SIGTERM when dropped.
pub struct Background(Child);

impl Background {
    /// Starts `walfill ARGS`.
    pub fn start(walfill: &Walfill, args: &[&str]) -> Background {
        let child = walfill
            .command_env(args, &[])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn walfill");
        Background(child)
    }

    /// Sends signal `name` (HUP, TERM).
    pub fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .args([&format!("-{name}"), &self.0.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Whether it still runs (`Err` with its exit status if not).
    pub fn running(&mut self) -> Result<(), std::process::ExitStatus> {
        match self.0.try_wait().expect("wait") {
            None => Ok(()),
            Some(status) => Err(status),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// Waits until `sql` on `db` returns true, showing the services' logs when it
/// times out.
pub fn wait_for(db: &TestDb, sql: &str, timeout: Duration, what: &str, services: &[&Service]) {
    let started = Instant::now();
    let mut client = db.client();
    loop {
        let ok: Option<bool> = client.query_one(sql, &[]).map(|r| r.get(0)).unwrap_or(None);
        if ok == Some(true) {
            return;
        }
        if started.elapsed() > timeout {
            let logs: Vec<String> = services.iter().map(|s| s.log()).collect();
            panic!(
                "timed out waiting for {what}; logs:\n{}",
                logs.join("\n-----\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `view` holds exactly the transform of `source` (compared by
/// hash), then checks it row by row.
pub fn wait_view_matches(
    db: &TestDb,
    view: &str,
    source: &str,
    select: &str,
    filter: Option<&str>,
    services: &[&Service],
) {
    let filter = filter.map(|f| format!(" WHERE {f}")).unwrap_or_default();
    let sql = format!(
        "SELECT (SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t.id), ''))
                   FROM (SELECT {select} FROM {source}{filter}) t)
              = (SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t.id), ''))
                   FROM {view} t)"
    );
    wait_for(
        db,
        &sql,
        Duration::from_secs(120),
        &format!("{view} to match"),
        services,
    );
    super::assert_view_matches(db, view, source, select, filter_arg(&filter), "id");
}

fn filter_arg(filter: &str) -> Option<&str> {
    filter.strip_prefix(" WHERE ")
}

/// Runs `walfill verify TARGET` while a `sync` follows the version:
/// `Ok(stdout)`, or `Err((exit code, stderr))`.
pub fn verify_followed(walfill: &Walfill, target: &str) -> Result<String, (Option<i32>, String)> {
    let sync = Background::start(walfill, &["sync"]);
    let out = walfill.run(&["verify", target]);
    drop(sync);
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err((
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )),
    }
}
