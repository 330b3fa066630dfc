//! A value read from files and read again when they change: TLS certificates, SASL credentials.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How often, at most, the files are checked for a change.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Why files could not be loaded: the config key that names them, and what is wrong.
pub(crate) type LoadError = (&'static str, String);

/// The value loaded from `paths`. [`Watched::get`] checks, at most once a second, whether a file's
/// modification time changed and loads them again if so. A new version that cannot be loaded is
/// logged and the previous one stays (mid-rotation, a certificate and its key may not match yet).
#[derive(Debug)]
pub(crate) struct Watched<T> {
    what: &'static str,
    paths: Vec<PathBuf>,
    load: fn(&[PathBuf]) -> Result<T, LoadError>,
    state: Mutex<State<T>>,
}

#[derive(Debug)]
struct State<T> {
    value: Arc<T>,
    modified: Vec<Option<SystemTime>>,
    checked: Instant,
}

impl<T> Watched<T> {
    /// Loads the value now: a failure here is a startup error.
    pub(crate) fn load(
        what: &'static str,
        paths: Vec<PathBuf>,
        load: fn(&[PathBuf]) -> Result<T, LoadError>,
    ) -> Result<Watched<T>, LoadError> {
        let modified = paths.iter().map(|p| modified(p)).collect();
        let value = Arc::new(load(&paths)?);
        Ok(Watched { what, paths, load, state: Mutex::new(State { value, modified, checked: Instant::now() }) })
    }

    pub(crate) fn get(&self) -> Arc<T> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.checked.elapsed() >= CHECK_EVERY {
            state.checked = Instant::now();
            let now: Vec<_> = self.paths.iter().map(|p| modified(p)).collect();
            if now != state.modified {
                match (self.load)(&self.paths) {
                    Ok(value) => {
                        tracing::info!(what = self.what, file = %self.paths[0].display(), "loaded again");
                        crate::metrics::security_file_reloaded(self.what);
                        state.value = Arc::new(value);
                        state.modified = now;
                    }
                    Err((key, reason)) => {
                        tracing::warn!(what = self.what, key, %reason, "files changed but cannot be used; keeping the previous version")
                    }
                }
            }
        }
        state.value.clone()
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}
