//! `ithaca ingest ztf`, `ithaca ingest catalog` and `ithaca brokers add`
//! against `ithaca serve broker`: progress on stderr, a truncated file named
//! and skipped while the others land, a non-zero exit that says so,
//! re-ingest changing nothing, a broker credential read from stdin.

use crate::common;

use common::astro;
use std::process::Output;

fn ingest(url: &str, args: &[&std::ffi::OsStr]) -> Output {
    let mut cmd = common::ithaca();
    cmd.args(["ingest"]).args(args).args(["--broker-url", url]);
    cmd.output().expect("run ithaca ingest")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn ingest_ztf_and_catalogs_from_the_command_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_broker, url) = common::serve("broker", &common::sqlite_path(&dir, "broker"), "unused");
    let good =
        std::fs::read(astro::alerts_dir().join("v4.02/2695378462115010012.avro")).expect("read");
    let bad = dir.path().join("truncated.avro");
    std::fs::write(&bad, &good[..good.len() / 2]).expect("write");
    let alerts = astro::alerts_dir();

    let out = ingest(&url, &["ztf".as_ref(), alerts.as_os_str(), bad.as_os_str()]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        !out.status.success(),
        "a skipped file makes the exit non-zero"
    );
    assert!(
        stdout.contains(
            "39 files: 40 alerts read, 40 newly stored, 0 files already ingested, 1 skipped"
        ),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!("skipped {}: truncated.avro:", bad.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains("[##############################] 39/39 done"),
        "progress: {stderr}"
    );

    let again = ingest(&url, &["ztf".as_ref(), alerts.as_os_str()]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(
        text(&again.stdout).contains(
            "38 files: 40 alerts read, 0 newly stored, 38 files already ingested, 0 skipped"
        ),
        "{}",
        text(&again.stdout)
    );

    for (file, rows) in [
        ("hipparcos2_hp_le_6.0.csv", "4559 hipparcos2"),
        ("openngc_galaxies_z_le_0.01.csv", "2588 openngc"),
    ] {
        let path = astro::data().join("catalogs").join(file);
        let out = ingest(&url, &["catalog".as_ref(), path.as_os_str()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains(rows), "{}", text(&out.stdout));
        let out = ingest(&url, &["catalog".as_ref(), path.as_os_str()]);
        assert!(
            text(&out.stdout).contains("already ingested"),
            "{}",
            text(&out.stdout)
        );
    }
    let out = ingest(&url, &["catalog".as_ref(), bad.as_os_str()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("truncated.avro"),
        "{}",
        text(&out.stderr)
    );
}
