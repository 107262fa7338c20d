//! Peak memory of a child process, read from `/proc/<pid>/status` (VmHWM,
//! the resident set's high-water mark) while it runs.

use std::io::Read;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How a measured run ended.
#[derive(Debug)]
pub struct Measured {
    /// The exit status.
    pub status: ExitStatus,
    /// Everything it wrote to stderr.
    pub stderr: String,
    /// The highest VmHWM seen, in KiB (0 if it exited before the first read).
    pub peak_rss_kib: u64,
}

impl Measured {
    /// The peak in MiB, for messages.
    pub fn peak_mib(&self) -> f64 {
        self.peak_rss_kib as f64 / 1024.0
    }
}

/// The `VmHWM` of process `pid` in KiB, if it is still there.
pub fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Waits for `child` (spawned with stderr piped, as `Walfill::spawn` does),
/// polling its peak RSS until it exits; kills it after `timeout`. Stderr is
/// drained on a thread so a chatty child never blocks on a full pipe.
pub fn wait_measuring_peak_rss(mut child: Child, timeout: Duration) -> Measured {
    let pid = child.id();
    let reader = child.stderr.take().map(|mut pipe| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    });
    let started = Instant::now();
    let mut peak = 0;
    let status = loop {
        if let Some(kib) = vm_hwm_kib(pid) {
            peak = peak.max(kib);
        }
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let status = child.wait().expect("wait for the killed child");
            let stderr = reader
                .map(|r| r.join().unwrap_or_default())
                .unwrap_or_default();
            panic!("the child did not finish in {timeout:?} ({status}):\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stderr = reader
        .map(|r| r.join().unwrap_or_default())
        .unwrap_or_default();
    Measured {
        status,
        stderr,
        peak_rss_kib: peak,
    }
}
