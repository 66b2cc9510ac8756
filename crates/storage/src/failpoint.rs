//! Test-only crash points, so crash tests stop the broker at an exact step
//! instead of racing a kill against a few milliseconds of work.
//!
//! `STROM_FAILPOINTS` names the points to arm, comma-separated, each as
//! `point=action`: `pause` logs `failpoint <point> reached` and blocks the
//! thread for good (the test then kills the process, knowing where it
//! stands), `abort` logs the same line and aborts the process at once.
//! The variable is read once, at the first point reached; when it is unset
//! a point costs one atomic load.
//!
//! Points, in the order a cleaner swap passes them (see [`crate::cleaner::swap`]):
//! `cleaner.cleaned` (cleaned copy written, swap not begun),
//! `cleaner.swap.renamed_to_swap` (step 1 done), `cleaner.swap.old_deleted`
//! (step 2 done), `cleaner.swap.swapped_in` (step 3 done, the `.deleted`
//! files not yet removed).

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable that arms failpoints.
pub const ENV_VAR: &str = "STROM_FAILPOINTS";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Pause,
    Abort,
}

/// The armed points; `None` when nothing is armed, the production case.
static ARMED: OnceLock<Option<HashMap<String, Action>>> = OnceLock::new();

fn armed() -> Option<&'static HashMap<String, Action>> {
    let points = ARMED.get_or_init(|| {
        let points = std::env::var(ENV_VAR).map(|spec| parse(&spec)).unwrap_or_default();
        (!points.is_empty()).then_some(points)
    });
    points.as_ref()
}

/// Parses `point=action,...`; an entry that is not understood is reported
/// and ignored, so a typo shows in the log rather than silently.
fn parse(spec: &str) -> HashMap<String, Action> {
    let mut points = HashMap::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let action = match entry.split_once('=') {
            Some((point, "pause")) => Some((point, Action::Pause)),
            Some((point, "abort")) => Some((point, Action::Abort)),
            _ => None,
        };
        match action {
            Some((point, action)) => {
                points.insert(point.trim().to_owned(), action);
            }
            None => tracing::error!("{ENV_VAR}: ignoring {entry:?}: expected point=pause or point=abort"),
        }
    }
    points
}

/// Stops here if `point` is armed.
pub fn hit(point: &str) {
    let Some(action) = armed().and_then(|points| points.get(point)) else { return };
    // The test waits for this line, then kills the process.
    tracing::warn!("failpoint {point} reached: {action:?}");
    match action {
        Action::Abort => std::process::abort(),
        Action::Pause => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_into_points_and_actions() {
        let points = parse(" cleaner.cleaned=pause,cleaner.swap.old_deleted=abort,,bogus,x=later");
        assert_eq!(points.len(), 2);
        assert_eq!(points["cleaner.cleaned"], Action::Pause);
        assert_eq!(points["cleaner.swap.old_deleted"], Action::Abort);
    }

    #[test]
    fn unarmed_points_pass() {
        hit("no.such.point");
    }
}
