//! Wall-clock deadlines on the runtime's clock, for the driver and the budget.

use std::time::Duration;

use crate::time::Timestamp;

/// How far ahead a deadline too far away for the clock is put: about 30 years, no deadline.
pub(super) const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);

/// Converts a wall-clock deadline to the runtime's clock, relative to now.
pub(super) fn instant_of(deadline: Timestamp) -> tokio::time::Instant {
    let left = deadline
        .as_millis()
        .saturating_sub(Timestamp::now().as_millis());
    let left = Duration::from_millis(u64::try_from(left).unwrap_or(0));
    let now = tokio::time::Instant::now();
    now.checked_add(left).unwrap_or_else(|| now + FAR)
}
