//! A fair share for every caller: one person floods a module while a second person's calls
//! are timed; the flood is answered "busy" (its own failure kind, with when to try again)
//! past the flooder's share, and the second person is never made to wait behind it.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mesh_core::client::{CallError, Outcome};
use mesh_core::subjects::FullName;
use mesh_core::subjects::limits::{Limits, LimitsTable};
use serde_json::json;

use crate::bus::{Bus, GENEROUS};

/// Calls a module holds at once by default, and a caller's share of them when alone: all
/// but the eighth kept for callers with nothing running.
const SLOTS: usize = 256;
const SHARE: usize = SLOTS - SLOTS / 8;
/// What one caller may have waiting behind their share: as many again.
const QUEUE: usize = SHARE;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_persons_flood_queues_behind_nobody_but_themselves() {
    let bus = Bus::accounts(
        &["echo"],
        &[("ann", &["mesh.echo.>"]), ("guest", &["mesh.echo.echo"])],
    )
    .await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let ann = bus.client_as(Some("ann")).await;
    let guest = bus.client_as(Some("guest")).await;

    // 520 calls that each hold a slot for a minute, sent at once on ann's own connection.
    let nats = ann.nats().clone();
    let inbox = "_INBOX.ann.flood";
    let mut replies = nats.subscribe(format!("{inbox}.>")).await.unwrap();
    let flood = 520;
    for n in 0..flood {
        nats.publish_with_reply(
            "mesh.echo.sleep",
            format!("{inbox}.{n}"),
            r#"{"ms": 60000}"#.into(),
        )
        .await
        .unwrap();
    }
    nats.flush().await.unwrap();

    // Past ann's share and the calls she may have waiting, the rest is busy at once.
    let busy = flood - SHARE - QUEUE;
    for _ in 0..busy {
        let m = tokio::time::timeout(GENEROUS, replies.next())
            .await
            .expect("a busy answer, not silence")
            .unwrap();
        let h = m.headers.as_ref().expect("an error answer has headers");
        assert_eq!(
            h.get("Nats-Service-Error-Code").map(|v| v.as_str()),
            Some("429"),
            "{h:?}"
        );
        let ms: u64 = h.get("Mesh-Retry-After").unwrap().as_str().parse().unwrap();
        assert!(ms > 0);
    }

    // guest, meanwhile, is answered as if nobody else were there (the bound only catches a
    // hang: before, guest waited the whole minute behind ann's flood and was told "slow").
    let started = Instant::now();
    for _ in 0..5 {
        let r = guest
            .call(
                &FullName::parse("echo").unwrap(),
                &json!({"text": "hi"}),
                GENEROUS,
            )
            .await
            .unwrap();
        assert_eq!(r.text_content(), "hi");
    }
    eprintln!(
        "guest's five calls during the flood: {:?}",
        started.elapsed()
    );

    // ann's next call is busy, through the mesh's client: its own kind, with when to retry.
    let e = ann
        .call(
            &FullName::parse("echo").unwrap(),
            &json!({"text": "mine"}),
            GENEROUS,
        )
        .await
        .unwrap_err();
    assert_eq!(e.outcome(), Outcome::Busy, "{e}");
    let CallError::Busy { retry_after, .. } = &e else {
        panic!("{e:?}")
    };
    assert!(*retry_after > Duration::ZERO);
    assert!(e.to_string().contains("try again in"), "{e}");
    // Nothing more of the flood was answered: the rest runs or waits its turn.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), replies.next())
            .await
            .is_err(),
        "a call of the flood within ann's share was answered busy"
    );
}

/// Four people flood a module together, each with calls that hold a slot for a minute, as
/// many as a share of one caller alone and more; a fifth person's calls meanwhile start at
/// once — answered within GENEROUS, far less than the minute a flooder's call holds a slot;
/// their time beside their quiet time is printed, not asserted (a measure, not a bound) —
/// and each flooder hears busy past their share of four. (Before: each person's share was a fixed quarter of the slots, so
/// four shares were all of them, and the fifth waited out the flooders' calls, told nothing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_flooders_leave_a_fifth_a_slot_at_once() {
    let flooders = ["f1", "f2", "f3", "f4"];
    let mut people: Vec<(&str, &[&str])> = flooders
        .iter()
        .map(|f| (*f, &["mesh.echo.>"][..]))
        .collect();
    people.push(("vic", &["mesh.echo.echo"]));
    let bus = Bus::accounts(&["echo"], &people).await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let vic = bus.client_as(Some("vic")).await;
    let echo = FullName::parse("echo").unwrap();
    async fn time_five(vic: &mesh_core::client::Client, echo: &FullName) -> Duration {
        let mut took = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            let r = vic.call(echo, &json!({"text": "hi"}), GENEROUS).await;
            took.push(started.elapsed());
            assert_eq!(r.expect("vic's call").text_content(), "hi");
        }
        took.sort();
        took[2]
    }
    let quiet = time_five(&vic, &echo).await;

    // 500 sleeping calls from each flooder, sent in turn, one of each at a time: more than a
    // share of one caller alone and as many again waiting (224 of echo's 256 slots outside
    // the reserve, and 224), so each hears busy however their floods interleave at the module
    // (a flood that arrives first, alone, is admitted at the share of one: so it was when
    // 130 each let one flooder on a loaded machine hear no busy).
    let mut conns = Vec::new();
    for f in flooders {
        let nats = bus.client_as(Some(f)).await.nats().clone();
        let inbox = format!("_INBOX.{f}.flood");
        let replies = nats.subscribe(format!("{inbox}.>")).await.unwrap();
        conns.push((nats, inbox, replies));
    }
    let per = 500;
    for n in 0..per {
        for (nats, inbox, _) in &conns {
            nats.publish_with_reply(
                "mesh.echo.sleep",
                format!("{inbox}.{n}"),
                r#"{"ms": 60000}"#.into(),
            )
            .await
            .unwrap();
        }
        if n % 10 == 9 {
            for (nats, _, _) in &conns {
                nats.flush().await.unwrap();
            }
        }
    }
    for (nats, _, _) in &conns {
        nats.flush().await.unwrap();
    }
    // Past its share of four and as many waiting, each flooder hears busy at once; every
    // other call of theirs holds a slot or waits for one for the next minute.
    for (f, (_, _, replies)) in flooders.iter().zip(conns.iter_mut()) {
        let m = tokio::time::timeout(GENEROUS, replies.next())
            .await
            .unwrap_or_else(|_| panic!("{f} heard no busy answer"))
            .unwrap();
        let h = m.headers.as_ref().expect("an error answer has headers");
        assert_eq!(
            h.get("Nats-Service-Error-Code").map(|v| v.as_str()),
            Some("429"),
            "{f}: {h:?}"
        );
    }
    // The fifth person's calls start at once: nothing of theirs waits for a flooder's call
    // to end (those hold their slots a minute, GENEROUS is far less).
    let flooded = time_five(&vic, &echo).await;
    eprintln!(
        "vic's median call: quiet {quiet:?}, under four flooders {flooded:?} ({:.2}×)",
        flooded.as_secs_f64() / quiet.as_secs_f64()
    );
}

/// Limits as a grants file says them: guest's calls a minute, carol one call at a time.
const GRANTS: &str = r#"
modules { catalog {}, echo {} }
roles {
  everything { all: true }
  guest { tools: [echo], limits: { per_minute: 3 } }
  slow { tools: [echo_sleep], limits: { in_flight: 1 } }
}
people {
  ann { roles: [everything] }
  guest { roles: [guest] }
  carol { roles: [slow] }
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grants_files_limits_reach_every_module_and_the_audit() {
    let root = mesh_bus::natsconf::parse_str(GRANTS, std::path::Path::new("grants.conf")).unwrap();
    let grants = mesh_bus::grants::Grants::read(&root).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let limits = dir.path().join("limits.json");
    std::fs::write(&limits, serde_json::to_vec(&grants.limits_table()).unwrap()).unwrap();
    let bus = Bus::accounts(
        &["catalog", "echo"],
        &[
            ("ann", &["mesh.>"]),
            ("guest", &["mesh.echo.echo"]),
            ("carol", &["mesh.echo.sleep"]),
        ],
    )
    .await;
    let _catalog = bus.serve_catalog_with_limits(Some(limits.clone())).await;
    // echo asks the catalogue for the limits as it starts.
    let _echo = bus.serve(mesh_echo::module()).await;
    let echo = FullName::parse("echo").unwrap();
    let hi = json!({"text": "hi"});

    let guest = bus.client_as(Some("guest")).await;
    for _ in 0..3 {
        guest.call(&echo, &hi, GENEROUS).await.unwrap();
    }
    let e = guest.call(&echo, &hi, GENEROUS).await.unwrap_err();
    let CallError::Busy { retry_after, .. } = &e else {
        panic!("guest's fourth call in a minute: {e:?}")
    };
    // A token comes back every 20 s.
    assert!(*retry_after > Duration::from_secs(10), "{retry_after:?}");
    // ann has no such bound.
    let ann = bus.client_as(Some("ann")).await;
    for _ in 0..10 {
        ann.call(&echo, &hi, GENEROUS).await.unwrap();
    }

    // carol's two calls at once run one after the other: the second waits its turn.
    let carol = bus.client_as(Some("carol")).await;
    let sleep = FullName::parse("echo_sleep").unwrap();
    let nap = json!({"ms": 400});
    let started = Instant::now();
    let (a, b) = tokio::join!(
        carol.call(&sleep, &nap, GENEROUS),
        carol.call(&sleep, &nap, GENEROUS),
    );
    assert!(!a.unwrap().is_error && !b.unwrap().is_error);
    assert!(
        started.elapsed() >= Duration::from_millis(800),
        "carol's calls ran side by side: {:?}",
        started.elapsed()
    );

    // The audit shows them.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(["audit", "--offline", "--config"])
        .arg(bus.config_path())
        .arg("--limits")
        .arg(&limits)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let row = |who: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(who) && !l.contains("yes") && !l.contains(" - "))
            .map(|l| {
                l.split("  ")
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(String::from)
                    .collect()
            })
            .next()
            .unwrap_or_else(|| panic!("no limits row for {who}:\n{text}"))
    };
    assert_eq!(row("guest@PEOPLE"), ["guest@PEOPLE", "a fair share", "3"]);
    assert_eq!(row("carol@PEOPLE"), ["carol@PEOPLE", "1", "no bound"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_is_its_own_kind_on_every_surface() {
    // ann may call once a minute.
    let dir = tempfile::tempdir().unwrap();
    let limits = dir.path().join("limits.json");
    let mut table = LimitsTable::default();
    table.callers.insert(
        "ann@PEOPLE".into(),
        Limits {
            in_flight: None,
            per_minute: Some(1),
        },
    );
    std::fs::write(&limits, serde_json::to_vec(&table).unwrap()).unwrap();
    let bus = Bus::accounts(&["catalog", "echo"], &[("ann", &["mesh.>"])]).await;
    let _catalog = bus.serve_catalog_with_limits(Some(limits)).await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let ann = bus.client_as(Some("ann")).await;
    let echo = FullName::parse("echo").unwrap();
    ann.call(&echo, &json!({"text": "hi"}), GENEROUS)
        .await
        .unwrap();

    // mesh call: exit 7, saying when to try again.
    let connect = bus.flags("ann");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .args(&connect)
        .args(["call", "echo", "text=hi"])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{err}");
    assert!(
        err.contains("busy") && err.contains("try again in"),
        "{err}"
    );

    // mesh mcp: an error result marked busy, with when to try again.
    let mut stdio = crate::hostile_relay::Stdio::start(&bus).await;
    stdio
        .send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#)
        .await;
    let r = stdio.answer(2, &mut 0).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(r["result"]["_meta"]["mesh/outcome"], "busy", "{r}");
    assert!(
        r["result"]["_meta"]["mesh/retryAfterMs"].as_u64().unwrap() > 0,
        "{r}"
    );

    // Through the console, mesh call tells busy as on the bus.
    let (_console, url) = crate::mcp::console_as(&connect).await;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mesh"))
        .env("MESH_CONSOLE_TOKEN", crate::mcp::TOKEN)
        .args(["call", "--console", &url, "echo", "text=hi"])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{err}");
    assert!(err.contains("busy"), "{err}");
}

/// The catalogue's own runtime reads the limits it publishes (from its own verb, in its own
/// account, without a permission violation every refresh): a person's calls a minute bound
/// their listing of the catalogue too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalogue_shares_itself_by_the_limits_it_publishes() {
    let root = mesh_bus::natsconf::parse_str(GRANTS, std::path::Path::new("grants.conf")).unwrap();
    let grants = mesh_bus::grants::Grants::read(&root).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let limits = dir.path().join("limits.json");
    std::fs::write(&limits, serde_json::to_vec(&grants.limits_table()).unwrap()).unwrap();
    let bus = Bus::accounts(&["catalog"], &[("guest", &["mesh.catalog.modules"])]).await;
    let _catalog = bus.serve_catalog_with_limits(Some(limits)).await;
    let guest = bus.client_as(Some("guest")).await;
    let modules = FullName::parse("catalog_modules").unwrap();
    // guest has 3 calls a minute: by the fourth at the latest (the catalogue reads its
    // limits as it starts), guest hears busy.
    let mut busy = None;
    for n in 0..8 {
        match guest.call(&modules, &json!({}), GENEROUS).await {
            Ok(r) => assert!(!r.is_error, "{}", r.text_content()),
            Err(CallError::Busy { .. }) => {
                busy = Some(n);
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let busy = busy.expect("the catalogue never applied guest's calls a minute");
    assert!(busy >= 3, "busy after {busy} calls");
}

/// Sends `subject` requests from `nats`, 2,000 a second, until `stop`, replies to its own
/// inbox; how many answers came back, how many of them busy, and how many were sent.
async fn flood(
    nats: async_nats::Client,
    subject: &'static str,
    body: &'static [u8],
    stop: tokio::sync::watch::Receiver<bool>,
) -> (usize, usize, usize) {
    let inbox = nats.new_inbox();
    let mut replies = nats.subscribe(format!("{inbox}.>")).await.unwrap();
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    let counts = std::sync::Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let counted = counts.clone();
    let counting = tokio::spawn(async move {
        while let Some(m) = replies.next().await {
            counted[0].fetch_add(1, Relaxed);
            if mesh_core::subjects::limits::retry_after(m.headers.as_ref()).is_some() {
                counted[1].fetch_add(1, Relaxed);
            }
        }
    });
    // 2,000 a second: far less than the attack that made eve's `mesh tools` fail (15,000),
    // and still many times what the catalogue answers a second in a debug build (each
    // request of the flood costs the test's own process, a debug build, a busy answer).
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut sent = 0;
    while !*stop.borrow() {
        tick.tick().await;
        for _ in 0..20 {
            nats.publish_with_reply(subject, format!("{inbox}.{sent}"), body.into())
                .await
                .unwrap();
            sent += 1;
        }
        nats.flush().await.unwrap();
    }
    // Every request is answered (nats-server holds a request's reply mapping until its
    // answer): wait until the answers stop coming.
    nats.flush().await.unwrap();
    let mut last = usize::MAX;
    let settled = tokio::time::timeout(GENEROUS, async {
        while counts[0].load(Relaxed) != last {
            last = counts[0].load(Relaxed);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let _ = settled.await;
    drop(nats);
    counting.abort();
    eprintln!("{subject}: {} answers of {sent}", counts[0].load(Relaxed));
    (counts[0].load(Relaxed), counts[1].load(Relaxed), sent)
}

/// One person floods each verb a person can reach without calling a tool — the catalogue's
/// listing, a module's `tools`, the services protocol — while another uses the same verbs:
/// each verb answers in turn by caller, so the second is answered every time and the flood
/// hears busy past its queue. (Before: guest's 15,000 listings a second made eve's `mesh
/// tools` fail four times in five.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_each_verb_holds_up_nobody_else() {
    let verbs = [
        "mesh.catalog.listing",
        "mesh.echo.tools",
        "$SRV.PING",
        "$SRV.INFO.echo",
    ];
    let bus = Bus::accounts(
        &["catalog", "echo"],
        &[("guest", &["mesh.echo.echo"]), ("eve", &["mesh.echo.echo"])],
    )
    .await;
    let _catalog = bus.serve_catalog().await;
    let _echo = bus.serve(mesh_echo::module()).await;
    let eve = bus.client_as(Some("eve")).await;
    for verb in verbs {
        let (stop_tx, stop) = tokio::sync::watch::channel(false);
        let guest = bus.client_as(Some("guest")).await.nats().clone();
        let body: &'static [u8] = if verb.ends_with("listing") {
            b"{}"
        } else {
            b""
        };
        let flooding = tokio::spawn(flood(guest, verb, body, stop));
        // The flood under way a second before eve asks, and a second after.
        tokio::time::sleep(Duration::from_secs(1)).await;
        for n in 0..5 {
            let asked = match verb {
                "mesh.catalog.listing" => eve
                    .discover(None, GENEROUS)
                    .await
                    .map(|d| assert!(format!("{d:?}").contains("echo"), "{d:?}")),
                "mesh.echo.tools" => eve.tools("echo", GENEROUS).await.map(|t| {
                    assert!(!t.tools.is_empty());
                }),
                _ => eve
                    .nats()
                    .request(verb, "".into())
                    .await
                    .map(|m| assert!(!m.payload.is_empty()))
                    .map_err(|e| mesh_core::client::CallError::Connection {
                        target: verb.into(),
                        why: e.to_string(),
                    }),
            };
            if let Err(e) = asked {
                panic!("eve's {verb} #{n} during guest's flood: {e}");
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop_tx.send(true).unwrap();
        let (answered, busy, sent) = flooding.await.unwrap();
        eprintln!("{verb}: guest sent {sent}, heard busy {busy} times; eve answered 5 of 5");
        assert!(
            busy > 0,
            "guest's flood of {verb} never heard busy ({sent} sent)"
        );
        // Each request answered by every module it reaches (a ping reaches both).
        let answering = if verb == "$SRV.PING" { 2 } else { 1 };
        assert_eq!(
            answered,
            sent * answering,
            "{verb}: requests left unanswered"
        );
    }
}
