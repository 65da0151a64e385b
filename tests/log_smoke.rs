#![allow(clippy::unwrap_used)]
use serde_json::json;
use session_state::*;

#[test]
fn create_write_fork_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db/states.sqlite");
    let mut log = LogOptions::new().create(dir.path(), "/proj").unwrap();
    assert!(!log.is_materialized());
    let role = SessionState::<serde_json::Value>::open(Options::new("role").database_path(&db)).unwrap();
    let e1 = role.write(&mut log, &json!({"name": "a"})).unwrap().unwrap();
    assert!(!log.is_materialized());
    assert_eq!(role.read(&log).unwrap(), Some(json!({"name":"a"})));
    let m1 = log.append(NewEntry::message(json!({"role":"user","content":"hi"}))).unwrap();
    assert!(log.is_materialized());
    let e2 = role.patch(&mut log, &json!({"x": 1})).unwrap().unwrap();
    assert_eq!(role.read(&log).unwrap(), Some(json!({"name":"a","x":1})));
    assert_eq!(role.patch(&mut log, &json!({"x": 1})).unwrap(), None);
    log.navigate(&m1).unwrap();
    let e3 = role.write(&mut log, &json!("fork")).unwrap().unwrap();
    assert_eq!(role.read_at(&log, &e2).unwrap(), Some(json!({"name":"a","x":1})));
    assert_eq!(role.read_at(&log, &e3).unwrap(), Some(json!("fork")));
    assert_eq!(role.read_at(&log, &e1).unwrap(), Some(json!({"name":"a"})));
    let path = log.path().to_path_buf();
    drop(log);
    let log = SessionLog::open(&path).unwrap();
    assert_eq!(log.leaf_id(), Some(e3.as_str()));
    assert_eq!(role.read(&log).unwrap(), Some(json!("fork")));
    assert_eq!(role.read_at(&log, &e2).unwrap(), Some(json!({"name":"a","x":1})));
    let mut p = Projection::open(&db).unwrap();
    assert_eq!(p.read(&path, "role", Scope::Branch, None).unwrap(), Some(json!("fork")));
    assert_eq!(p.read(&path, "role", Scope::Branch, Some(&e2)).unwrap(), Some(json!({"name":"a","x":1})));
    assert_eq!(p.read(&path, "role", Scope::Branch, Some(&m1)).unwrap(), Some(json!({"name":"a"})));
    println!("{}", std::fs::read_to_string(&path).unwrap());
}
