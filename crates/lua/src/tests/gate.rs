//! A call that holds its state for good (inside a C function no budget interrupts) costs
//! its own thread, not the threads of the requests that come to the same state after it.

use super::*;
use std::sync::mpsc;
use std::time::Duration;

/// A request on state 0 of `scripts` (whichever thread runs it).
fn on_state_zero(scripts: &Arc<RouteScripts>) -> Arc<RequestLua> {
    Arc::new(RequestLua {
        state: 0,
        view: Mutex::new(View::new(LuaPhase::Rewrite, facts())),
        scripts: scripts.clone(),
    })
}

/// `f` on a thread of its own, its result if it comes within a minute (a thread blocked on
/// the stuck call's state would never give one).
fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || drop(tx.send(f())));
    rx.recv_timeout(Duration::from_secs(60)).ok()
}

#[test]
fn a_call_stuck_in_a_c_function_refuses_its_states_later_calls_instead_of_blocking_them() {
    let rt = runtime(
        r#"[[route]]
name = "r"
upstream = "u"
[route.lua]
access = '''
if ngx.var.arg_hold then hold() end
ngx.req.set_header("X-Ran", "1")
'''
log = 'ngx.ctx.logged = true'
"#,
    );
    let scripts = rt.scripts("r").unwrap().clone();
    // `hold`: a C function (from Lua's side) that returns when the test says so.
    let (release, held) = mpsc::channel::<()>();
    let held = Mutex::new(held);
    let hold = scripts.states[0]
        .lua()
        .create_function(move |_, ()| {
            let _ = held.lock().unwrap().recv();
            Ok(())
        })
        .unwrap();
    scripts.states[0].lua().globals().set("hold", hold).unwrap();

    let stuck = on_state_zero(&scripts);
    let holder = std::thread::spawn(move || {
        let mut req = get("/?hold=1");
        run(&stuck, LuaPhase::Access, head(&mut req))
    });
    while scripts.states[0].is_free() {
        std::thread::sleep(Duration::from_millis(5));
    }

    let refused_before = stats::refused_count();
    for _ in 0..2 {
        let next = on_state_zero(&scripts);
        let outcome = within_a_minute(move || {
            let mut req = get("/");
            run(&next, LuaPhase::Access, head(&mut req))
        });
        assert!(matches!(outcome, Some(Outcome::Failed)), "{outcome:?}");
    }
    let logged = on_state_zero(&scripts);
    assert!(within_a_minute(move || logged.run_log(200, 0)).is_some());
    let states = scripts.states.clone();
    let memory = within_a_minute(move || states[0].used_memory());
    assert!(memory.is_some(), "reading the memory waits for no call");
    assert!(stats::refused_count() >= refused_before + 3);

    // The state serves again once the call returns.
    release.send(()).unwrap();
    assert!(matches!(holder.join().unwrap(), Outcome::Continue));
    let next = on_state_zero(&scripts);
    let mut req = get("/");
    assert!(matches!(
        run(&next, LuaPhase::Access, head(&mut req)),
        Outcome::Continue
    ));
    assert_eq!(req.headers()["x-ran"], "1");
}
