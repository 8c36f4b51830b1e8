//! What the benches share: CPU time as criterion's measurement.

use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};

/// CPU time of the process (all its threads).
pub(crate) struct CpuTime;

fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to the pointer, which is a valid local.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    // CPU time since the process started: never negative, nanoseconds below 10^9.
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

impl Measurement for CpuTime {
    type Intermediate = Duration;
    type Value = Duration;
    fn start(&self) -> Duration {
        cpu_now()
    }
    fn end(&self, start: Duration) -> Duration {
        cpu_now().saturating_sub(start)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, v: &Duration) -> f64 {
        v.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        // Nanoseconds, formatted as the wall clock's are.
        static NS: WallTime = WallTime;
        NS.formatter()
    }
}
