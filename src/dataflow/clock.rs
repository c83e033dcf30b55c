//! Processing time: the wall clock, or a manual clock that only
//! `ADVANCE CLOCK` moves (servers started with `--manual-clock`), so that
//! tests of time-driven behaviour are deterministic.

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};

#[derive(Debug)]
pub struct Clock {
    manual: bool,
    /// The manual clock, in microseconds since the Unix epoch; it starts at 0.
    micros: AtomicI64,
}

impl Clock {
    pub fn new(manual: bool) -> Clock {
        Clock {
            manual,
            micros: AtomicI64::new(0),
        }
    }

    pub fn is_manual(&self) -> bool {
        self.manual
    }

    pub fn now(&self) -> DateTime<Utc> {
        if !self.manual {
            return Utc::now();
        }
        DateTime::from_timestamp_micros(self.micros.load(Ordering::SeqCst)).unwrap_or_default()
    }

    /// Move the manual clock forward.
    pub fn advance(&self, micros: i64) -> Result<DateTime<Utc>> {
        if !self.manual {
            return Err(Error::PrerequisiteState(
                "ADVANCE CLOCK needs a server started with --manual-clock".into(),
            ));
        }
        if micros < 0 {
            return Err(Error::InvalidParameter(
                "the clock cannot move backwards".into(),
            ));
        }
        self.micros.fetch_add(micros, Ordering::SeqCst);
        Ok(self.now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let clock = Clock::new(true);
        assert_eq!(clock.now().timestamp(), 0);
        clock.advance(1_500_000).expect("advance");
        assert_eq!(clock.now().timestamp_micros(), 1_500_000);
        assert!(clock.advance(-1).is_err());
    }

    #[test]
    fn wall_clock_refuses_to_be_advanced() {
        let clock = Clock::new(false);
        assert_eq!(
            clock.advance(1).expect_err("wall clock").sqlstate(),
            "55000"
        );
    }
}
