//! `kdirect demo` runs to its proof: consume, crash, restart, and every record exactly once in
//! the output files.
use std::process::Command;

#[test]
fn demo_proves_exactly_once_across_a_crash() {
    let dir = std::env::temp_dir().join(format!("kdirect-it-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(["demo", "--records-per-partition", "5000", "--dir"])
        .arg(&dir)
        .output()
        .expect("run kdirect demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    // The crash happened, and the restart re-ran the logged batch.
    assert!(
        stderr.contains("consumer killed during batch 5"),
        "{stderr}"
    );
    assert!(stderr.contains("re-ran batch 5 from offsets/5"), "{stderr}");
    // Per partition: 5000 records, offsets 0..=4999, no duplicates, nothing missing.
    for p in 0..4 {
        let row = format!("{p:>9} {:>9} {:>9} {:>9} {:>11} {:>8}", 5000, 0, 4999, 0, 0);
        assert!(stdout.contains(&row), "no row {row:?} in:\n{stdout}");
    }
    assert!(
        stdout.contains("total: 20000 of 20000 records, duplicates found: 0, missing: 0"),
        "{stdout}"
    );
    assert!(stdout.contains("OK: every record exactly once"), "{stdout}");
    // The output on disk: one finished file per batch (0..=9), the crashed batch's replaced.
    let files = std::fs::read_dir(dir.join("output"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        })
        .count();
    assert_eq!(files, 10);
    assert!(dir.join("checkpoint/commits/5").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn demo_refuses_a_used_directory() {
    let dir = std::env::temp_dir().join(format!("kdirect-it-demo-used-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("output")).unwrap();
    std::fs::write(dir.join("output/0.jsonl"), "{}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kdirect"))
        .args(["demo", "--records-per-partition", "100", "--dir"])
        .arg(&dir)
        .output()
        .expect("run kdirect demo");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not empty"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
