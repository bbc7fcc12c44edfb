//! The status LED: on while the data plane is in sync, a slow blink while it is out of
//! sync or the last transaction failed, off when the daemon is stopped.
//!
//! The LED is an `embedded_hal` output pin, so the driver below works with any pin (a GPIO
//! through another HAL, or a fake in tests); `SysfsLed` is the pin for a Linux LED class
//! device (`/sys/class/leds/NAME`), which is how OpenWrt exposes a router's front-panel
//! LEDs. A missing or unwritable LED is worth a warning, never a reason to stop routing.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use embedded_hal::digital::{ErrorKind, ErrorType, OutputPin, StatefulOutputPin};
use tokio::sync::watch;

/// Where the kernel lists LED class devices.
pub const SYSFS_LEDS: &str = "/sys/class/leds";

/// Half a period of the slow blink: one second on, one second off.
pub const SLOW_BLINK: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct LedError {
    path: PathBuf,
    what: String,
}

impl LedError {
    fn io(path: &Path, op: &str, e: io::Error) -> LedError {
        LedError { path: path.to_path_buf(), what: format!("cannot {op}: {e}") }
    }
}

impl fmt::Display for LedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.what)
    }
}

impl std::error::Error for LedError {}

impl embedded_hal::digital::Error for LedError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Other
    }
}

/// A Linux LED class device driven as an on/off pin.
#[derive(Debug)]
pub struct SysfsLed {
    dir: PathBuf,
    /// The brightness written for "on": the device's `max_brightness`.
    on: u32,
}

impl SysfsLed {
    /// Take over the LED `name` under `base` (normally [`SYSFS_LEDS`]; tests pass a
    /// temporary directory laid out like sysfs). The LED's trigger is set to `none` so that
    /// the kernel (heartbeat, netdev, ...) stops driving it.
    pub fn open(base: &Path, name: &str) -> Result<SysfsLed, LedError> {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(LedError { path: base.to_path_buf(), what: format!("status_led {name:?} is not an LED name") });
        }
        let dir = base.join(name);
        let max_path = dir.join("max_brightness");
        let text = std::fs::read_to_string(&max_path).map_err(|e| LedError::io(&max_path, "read", e))?;
        let on = match text.trim().parse::<u32>() {
            Ok(v) if v > 0 => v,
            _ => return Err(LedError { path: max_path, what: format!("invalid max_brightness {:?}", text.trim()) }),
        };
        let trigger = dir.join("trigger");
        std::fs::write(&trigger, "none").map_err(|e| LedError::io(&trigger, "write", e))?;
        Ok(SysfsLed { dir, on })
    }

    /// [`SysfsLed::open`], or `None` after a warning: the daemon runs without its LED.
    pub fn open_or_warn(base: &Path, name: &str) -> Option<SysfsLed> {
        match SysfsLed::open(base, name) {
            Ok(led) => Some(led),
            Err(e) => {
                log::warn!("status LED {name:?} not used: {e}");
                None
            }
        }
    }

    fn write_brightness(&self, value: u32) -> Result<(), LedError> {
        let path = self.dir.join("brightness");
        std::fs::write(&path, value.to_string()).map_err(|e| LedError::io(&path, "write", e))
    }
}

impl ErrorType for SysfsLed {
    type Error = LedError;
}

impl OutputPin for SysfsLed {
    fn set_low(&mut self) -> Result<(), LedError> {
        self.write_brightness(0)
    }

    fn set_high(&mut self) -> Result<(), LedError> {
        self.write_brightness(self.on)
    }
}

impl StatefulOutputPin for SysfsLed {
    /// Reads the device back rather than remembering the last write, so that someone else
    /// writing the LED shows up.
    fn is_set_high(&mut self) -> Result<bool, LedError> {
        let path = self.dir.join("brightness");
        let text = std::fs::read_to_string(&path).map_err(|e| LedError::io(&path, "read", e))?;
        text.trim()
            .parse::<u32>()
            .map(|v| v > 0)
            .map_err(|_| LedError { path, what: format!("invalid brightness {:?}", text.trim()) })
    }

    fn is_set_low(&mut self) -> Result<bool, LedError> {
        self.is_set_high().map(|high| !high)
    }
}

/// What the LED tells the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LedState {
    /// The daemon is stopped (or not yet running).
    #[default]
    Off,
    /// The data plane is in sync with the stored Services.
    InSync,
    /// Out of sync, or the last transaction failed.
    OutOfSync,
}

impl LedState {
    /// The state for the data plane's status.
    pub fn for_dataplane(in_sync: bool, last_error: bool) -> LedState {
        if in_sync && !last_error {
            LedState::InSync
        } else {
            LedState::OutOfSync
        }
    }

    pub fn pattern(self, half_period: Duration) -> Pattern {
        match self {
            LedState::Off => Pattern::Steady(false),
            LedState::InSync => Pattern::Steady(true),
            LedState::OutOfSync => Pattern::Blink(half_period),
        }
    }
}

/// Levels over time, as data: the driver asks for step after step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    Steady(bool),
    /// On, then off, each for this long.
    Blink(Duration),
}

impl Pattern {
    /// The level for step `n` (counted from the state change) and how long to hold it;
    /// `None` means until the state changes.
    pub fn step(&self, n: u64) -> (bool, Option<Duration>) {
        match *self {
            Pattern::Steady(level) => (level, None),
            Pattern::Blink(half) => (n.is_multiple_of(2), Some(half)),
        }
    }
}

/// Drive `pin` from the daemon's state until the sender is dropped; the LED is switched
/// off then. Write failures are logged once per run of failures and never end the loop:
/// an LED that comes back (a module reloaded) is picked up again.
pub async fn run<P: OutputPin<Error: fmt::Display>>(pin: P, rx: watch::Receiver<LedState>) {
    run_with(pin, rx, SLOW_BLINK).await
}

/// [`run`] with a chosen blink speed.
pub async fn run_with<P: OutputPin<Error: fmt::Display>>(
    mut pin: P,
    mut rx: watch::Receiver<LedState>,
    half_period: Duration,
) {
    let mut failing = false;
    loop {
        let pattern = rx.borrow_and_update().pattern(half_period);
        let mut n = 0u64;
        let sender_alive = loop {
            let (level, hold) = pattern.step(n);
            let result = if level { pin.set_high() } else { pin.set_low() };
            match result {
                Err(e) if !failing => {
                    log::warn!("status LED: {e}");
                    failing = true;
                }
                Ok(()) if failing => {
                    log::info!("status LED: writable again");
                    failing = false;
                }
                _ => {}
            }
            match hold {
                None => break rx.changed().await.is_ok(),
                Some(d) => match tokio::time::timeout(d, rx.changed()).await {
                    Err(_elapsed) => n += 1,
                    Ok(changed) => break changed.is_ok(),
                },
            }
        };
        if !sender_alive {
            if let Err(e) = pin.set_low() {
                log::warn!("status LED: cannot switch it off: {e}");
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A sysfs LED directory as the kernel lays it out.
    fn fake_led(base: &Path, name: &str, max: &str) -> PathBuf {
        let dir = base.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("max_brightness"), max).unwrap();
        std::fs::write(dir.join("brightness"), "0\n").unwrap();
        std::fs::write(dir.join("trigger"), "none [heartbeat] timer netdev\n").unwrap();
        dir
    }

    fn read(dir: &Path, file: &str) -> String {
        std::fs::read_to_string(dir.join(file)).unwrap()
    }

    #[test]
    fn on_and_off_write_brightness_and_take_over_the_trigger() {
        let base = tempfile::tempdir().unwrap();
        let dir = fake_led(base.path(), "green:status", "255\n");
        let mut led = SysfsLed::open(base.path(), "green:status").unwrap();
        assert_eq!(read(&dir, "trigger"), "none");

        led.set_high().unwrap();
        assert_eq!(read(&dir, "brightness"), "255");
        assert!(led.is_set_high().unwrap());
        assert!(!led.is_set_low().unwrap());

        led.set_low().unwrap();
        assert_eq!(read(&dir, "brightness"), "0");
        assert!(led.is_set_low().unwrap());

        led.toggle().unwrap();
        assert_eq!(read(&dir, "brightness"), "255");
        led.toggle().unwrap();
        assert_eq!(read(&dir, "brightness"), "0");
    }

    #[test]
    fn absent_bad_or_unwritable_leds_are_errors_that_name_the_path() {
        let base = tempfile::tempdir().unwrap();
        let e = SysfsLed::open(base.path(), "amber:wan").unwrap_err().to_string();
        assert!(e.contains("amber:wan/max_brightness"), "{e}");
        assert!(SysfsLed::open_or_warn(base.path(), "amber:wan").is_none());

        for name in ["", ".", "..", "../etc", "a/b"] {
            let e = SysfsLed::open(base.path(), name).unwrap_err().to_string();
            assert!(e.contains("not an LED name"), "{name:?}: {e}");
        }

        fake_led(base.path(), "zero", "0");
        let e = SysfsLed::open(base.path(), "zero").unwrap_err().to_string();
        assert!(e.contains("invalid max_brightness"), "{e}");

        // Root ignores permission bits, so a directory stands in for a file that cannot be written.
        let dir = fake_led(base.path(), "stuck", "1");
        std::fs::remove_file(dir.join("brightness")).unwrap();
        std::fs::create_dir(dir.join("brightness")).unwrap();
        let mut led = SysfsLed::open(base.path(), "stuck").unwrap();
        let e = led.set_high().unwrap_err().to_string();
        assert!(e.contains("stuck/brightness") && e.contains("cannot write"), "{e}");
    }

    #[test]
    fn patterns() {
        let half = Duration::from_millis(500);
        assert_eq!(LedState::InSync.pattern(half).step(0), (true, None));
        assert_eq!(LedState::Off.pattern(half).step(7), (false, None));
        let blink = LedState::OutOfSync.pattern(half);
        let levels: Vec<bool> = (0..6).map(|n| blink.step(n).0).collect();
        assert_eq!(levels, [true, false, true, false, true, false]);
        assert!((0..6).all(|n| blink.step(n).1 == Some(half)));
        assert_eq!(LedState::for_dataplane(true, false), LedState::InSync);
        assert_eq!(LedState::for_dataplane(false, false), LedState::OutOfSync);
        assert_eq!(LedState::for_dataplane(true, true), LedState::OutOfSync);
        assert_eq!(LedState::default(), LedState::Off);
    }

    /// Records every level written, on top of the real sysfs pin.
    struct Recording {
        led: SysfsLed,
        levels: Arc<Mutex<Vec<bool>>>,
    }

    impl ErrorType for Recording {
        type Error = LedError;
    }

    impl OutputPin for Recording {
        fn set_low(&mut self) -> Result<(), LedError> {
            self.levels.lock().unwrap().push(false);
            self.led.set_low()
        }
        fn set_high(&mut self) -> Result<(), LedError> {
            self.levels.lock().unwrap().push(true);
            self.led.set_high()
        }
    }

    async fn settle() {
        tokio::time::sleep(Duration::from_millis(60)).await;
    }

    #[tokio::test]
    async fn the_driver_follows_the_state_on_blink_off() {
        let base = tempfile::tempdir().unwrap();
        let dir = fake_led(base.path(), "led1", "1");
        let levels = Arc::new(Mutex::new(Vec::new()));
        let pin = Recording { led: SysfsLed::open(base.path(), "led1").unwrap(), levels: levels.clone() };
        let (tx, rx) = watch::channel(LedState::InSync);
        let half = Duration::from_millis(25);
        let driver = tokio::spawn(run_with(pin, rx, half));

        settle().await;
        assert_eq!(*levels.lock().unwrap(), [true], "steady on writes once");
        assert_eq!(read(&dir, "brightness"), "1");

        levels.lock().unwrap().clear();
        tx.send(LedState::OutOfSync).unwrap();
        tokio::time::sleep(half * 12).await;
        let blink = std::mem::take(&mut *levels.lock().unwrap());
        assert!(blink.len() >= 4, "a slow blink toggles: {blink:?}");
        assert!(blink.iter().enumerate().all(|(i, &l)| l == i.is_multiple_of(2)), "on, off, on, ...: {blink:?}");

        tx.send(LedState::Off).unwrap();
        settle().await;
        assert_eq!(*levels.lock().unwrap(), [false]);
        assert_eq!(read(&dir, "brightness"), "0");

        tx.send(LedState::InSync).unwrap();
        settle().await;
        assert_eq!(read(&dir, "brightness"), "1");
        drop(tx);
        driver.await.unwrap();
        assert_eq!(read(&dir, "brightness"), "0", "the LED goes off when the daemon stops");
    }

    #[tokio::test]
    async fn an_unwritable_led_never_stops_the_driver() {
        let base = tempfile::tempdir().unwrap();
        let dir = fake_led(base.path(), "led2", "1");
        let led = SysfsLed::open(base.path(), "led2").unwrap();
        std::fs::remove_file(dir.join("brightness")).unwrap();
        std::fs::create_dir(dir.join("brightness")).unwrap();
        let (tx, rx) = watch::channel(LedState::OutOfSync);
        let driver = tokio::spawn(run_with(led, rx, Duration::from_millis(10)));
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(!driver.is_finished());
        // The LED comes back: the driver writes it again.
        std::fs::remove_dir(dir.join("brightness")).unwrap();
        tx.send(LedState::InSync).unwrap();
        settle().await;
        assert_eq!(read(&dir, "brightness"), "1");
        drop(tx);
        driver.await.unwrap();
    }
}
