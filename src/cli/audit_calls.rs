//! `mesh audit calls`: who did call what, from the call log — a table that fits the
//! terminal, JSON lines for scripts, `--follow` for a live tail, `--config` to flag calls
//! today's permissions would not allow.

use std::collections::HashSet;
use std::io::Write as _;
use std::time::Duration;

use super::args::{CallsArgs, ConnectArgs, Since};
use mesh_bus::audit::{self, Model};
use mesh_bus::calllog::{self, Call, From, LogError, Stored};
use mesh_core::client::{Client, Exit};
use mesh_core::subjects::FullName;
use mesh_core::subjects::calllog::{CALLS_STREAM, REPORTS_STREAM, WORDS_STREAM};
use mesh_core::table;

/// How often `--follow` reads what came.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);
/// How long `--follow` waits for a call's other half (the server's event, the module's word)
/// before printing what it has.
const FOLLOW_HOLD: Duration = Duration::from_secs(3);

pub async fn run(connect: &ConnectArgs, args: CallsArgs) -> anyhow::Result<Exit> {
    let model = match &args.config {
        Some(path) => match today(path) {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!("mesh: cannot read the configuration: {e}");
                return Ok(Exit::Usage);
            }
        },
        None => None,
    };
    if let Some(tool) = &args.tool
        && FullName::parse(tool).is_err()
    {
        eprintln!("mesh: --tool {tool:?} is not a full tool name such as avu_add");
        return Ok(Exit::Usage);
    }
    let client = match Client::connect(&connect.config("mesh audit calls", false)).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mesh: {e}");
            return Ok(Exit::Usage);
        }
    };
    let since = match args.since {
        Since::At(t) => t,
        Since::Ago(d) => time::OffsetDateTime::now_utc() - d,
    };
    let from = From::Time(since);
    let mut next = [From::Seq(0); 3];
    let max = args.max;
    let read = |stream: &'static str, from: From| calllog::read(&client, stream, from, max);
    let newest = |stream: &'static str| calllog::read_newest(&client, stream, since, max);
    let ((calls, w0), (words, w1), (reports, w2)) = match tokio::try_join!(
        newest(CALLS_STREAM),
        newest(WORDS_STREAM),
        newest(REPORTS_STREAM)
    ) {
        Ok(all) => all,
        Err(e) => {
            eprintln!("mesh: {e}");
            return Ok(exit_of(&e));
        }
    };
    for (i, got) in [&calls, &words, &reports].into_iter().enumerate() {
        next[i] = got.last().map_or(from, |m| From::Seq(m.seq + 1));
    }
    // Said on stderr, before the rows: what this selection cannot show.
    for (what, w) in [
        ("nats-server's events of calls", &w0),
        ("modules' words", &w1),
        ("callers' reports", &w2),
    ] {
        if let Some(t) = w.evicted_before {
            eprintln!(
                "mesh: the log holds {what} only from {} on: older ones were pushed out by its limits (the grants file's log {{ max_bytes, max_age }}), so calls before then are missing",
                mesh_core::subjects::calllog::rfc3339(t)
            );
        }
        if w.left_out > 0 {
            eprintln!(
                "mesh: the {} oldest of {what} since {} were not read (--max {max}): the newest are shown; raise --max or narrow --since",
                w.left_out,
                mesh_core::subjects::calllog::rfc3339(since)
            );
        }
    }
    // The issuer's keys, to show a person acted for only where their ticket does: asked
    // once, when a word carries a ticket.
    let mut keys: Option<Vec<String>> = None;
    let rows: Vec<Call> = calllog::join(
        &calls,
        &words,
        &reports,
        issuer_keys(&client, &mut keys, &words).await,
    )
    .into_iter()
    .filter_map(|c| keep(c, &args, model.as_ref()))
    .collect();
    print(&rows, &args, true);
    if !args.follow {
        return Ok(Exit::Ok);
    }

    // Followed: what came since, joined with what still waits for its other half.
    let mut held: [Vec<Stored>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let mut printed: HashSet<(u8, u64, u32)> = HashSet::new();
    let mut first = true;
    let mut stop = mesh_core::runtime::Stop::listen()?;
    loop {
        tokio::select! {
            _ = stop.next() => return Ok(Exit::Ok),
            () = tokio::time::sleep(FOLLOW_EVERY) => {}
        }
        for (i, stream) in [CALLS_STREAM, WORDS_STREAM, REPORTS_STREAM]
            .into_iter()
            .enumerate()
        {
            let got = match read(stream, next[i]).await {
                Ok(g) => g,
                Err(e) => {
                    eprintln!("mesh: {e}");
                    return Ok(exit_of(&e));
                }
            };
            if let Some(last) = got.last() {
                next[i] = From::Seq(last.seq + 1);
            }
            held[i].extend(got);
        }
        let joined = calllog::join(
            &held[0],
            &held[1],
            &held[2],
            issuer_keys(&client, &mut keys, &held[1]).await,
        );
        let now = time::OffsetDateTime::now_utc();
        let mut ready = Vec::new();
        for c in joined {
            let age = mesh_core::subjects::calllog::parse_time(&c.at)
                .map(|t| now - t)
                .unwrap_or(time::Duration::ZERO);
            let whole = matches!(c.seen, calllog::Seen::BusAndModule | calllog::Seen::Caller);
            if (whole || age > time::Duration::try_from(FOLLOW_HOLD).unwrap_or_default())
                && printed.insert(c.record)
            {
                ready.push(c);
            }
        }
        // What waits for its other half stays a while, by the stream's own clock (what a
        // record says of its time is no bound); what is printed is remembered as long.
        let cutoff = now - time::Duration::seconds(30);
        for h in &mut held {
            h.retain(|m| m.time.is_none_or(|t| t > cutoff));
        }
        let kept: HashSet<(u8, u64)> = held
            .iter()
            .enumerate()
            .flat_map(|(i, h)| h.iter().map(move |m| (i as u8, m.seq)))
            .collect();
        printed.retain(|k| kept.contains(&(k.0, k.1)));
        let rows: Vec<Call> = ready
            .into_iter()
            .filter_map(|c| keep(c, &args, model.as_ref()))
            .collect();
        if !rows.is_empty() {
            print(&rows, &args, first && !args.json);
            first = false;
        }
    }
}

/// The issuer's keys, asked of the catalogue the first time one of `words` carries a ticket
/// (a person acted for is shown only where their ticket shows it); none until then, and none
/// when the catalogue does not say them (then nobody is shown as acted for, and why is said).
async fn issuer_keys<'a>(
    client: &Client,
    keys: &'a mut Option<Vec<String>>,
    words: &[Stored],
) -> &'a [String] {
    let wanted = keys.is_none()
        && words
            .iter()
            .any(|w| w.payload.windows(9).any(|b| b == b"\"ticket\":"));
    if wanted {
        *keys = Some(match calllog::issuer_keys(client).await {
            Ok(k) => k,
            Err(e) => {
                eprintln!("mesh: {e}: nobody is shown as acted for by a module");
                Vec::new()
            }
        });
    }
    keys.as_deref().unwrap_or_default()
}

fn exit_of(e: &LogError) -> Exit {
    match e {
        LogError::Denied(_) => Exit::Denied,
        LogError::Missing(_) | LogError::Silent(_) => Exit::NobodyServes,
        _ => Exit::Usage,
    }
}

/// Today's permissions from configuration `path`: its accounts, or — a server in operator
/// mode — the account JWTs of the resolver it names (and its preload) with the users'
/// credential files beside it (`creds/`, `operator/creds/`), as `mesh audit --config` reads
/// them.
fn today(path: &std::path::Path) -> Result<Model, String> {
    use mesh_bus::audit::jwts;
    let root = audit::parse_file(path).map_err(|e| e.to_string())?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let base = Model::read(&root).map_err(|e| e.to_string())?;
    let Some(configured) =
        jwts::configured(&root, dir).map_err(|e| format!("its operator does not read: {e}"))?
    else {
        return Ok(base);
    };
    let mut found = configured.preload;
    if let Some(resolver) = &configured.dir {
        found.extend(jwts::read_dir(resolver).map_err(|e| e.to_string())?);
    }
    let users = ["operator/creds", "creds"]
        .iter()
        .map(|c| dir.join(c))
        .find(|p| p.exists());
    audit::from_jwts(audit::JwtSources {
        trust: configured.trust,
        found,
        accounts_from: format!("the resolver {} names", path.display()),
        users: users.as_deref(),
        base: Some(&base),
        mapping: None,
        grants: None,
        learned: None,
    })
    .map(|(model, _)| model)
    .map_err(|e| e.to_string())
}

/// The call, if the filters keep it; flagged against today's permissions with `--config`.
fn keep(mut c: Call, args: &CallsArgs, model: Option<&Model>) -> Option<Call> {
    if !args.all && housekeeping(&c) {
        return None;
    }
    if let Some(p) = &args.person {
        let user = c.caller.split('@').next().unwrap_or_default();
        let for_user = c
            .for_person
            .as_deref()
            .and_then(|f| f.split('@').next())
            .unwrap_or_default();
        if user != p && for_user != p {
            return None;
        }
    }
    if args.module.as_ref().is_some_and(|m| *m != c.module) {
        return None;
    }
    // `echo_echo` finds echo's eponymous tool, which the log names `echo`.
    if args.tool.as_ref().is_some_and(|t| {
        !FullName::parse(t).is_ok_and(|t| c.full_tool().as_deref() == Some(t.as_str()))
    }) {
        return None;
    }
    if args.outcome.as_ref().is_some_and(|o| *o != c.outcome) {
        return None;
    }
    if let (Some(model), Some(tool)) = (model, c.tool.as_deref()) {
        // A call made for a person came on the tool's mesh-obo twin.
        let subject = if c.for_person.is_some() {
            mesh_core::subjects::obo_subject(&c.module, tool)
        } else {
            mesh_core::subjects::tool_subject(&c.module, tool)
        };
        c.allowed_today = Some(model.allows(&c.caller, &subject));
    }
    Some(c)
}

/// The catalogue's own traffic, which every module and client makes all the time
/// (registrations, listings, the keys, limits and tickets): left out unless `--all`. Only
/// the catalogue's word decides it (the mesh's own module, trusted as its ticket issuer):
/// what another module says never hides a call the bus saw.
fn housekeeping(c: &Call) -> bool {
    c.module == mesh_core::subjects::catalog::MODULE && c.tool.as_deref() != Some("forget")
}

/// A cell as the table shows it: one line, at most this many characters.
fn cell(text: &str) -> String {
    const MOST: usize = 200;
    let mut out: String = text.chars().take(MOST).collect();
    if text.chars().count() > MOST {
        out.push('…');
    }
    out
}

fn print(rows: &[Call], args: &CallsArgs, header: bool) {
    let mut out = std::io::stdout().lock();
    if args.json {
        for r in rows {
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string(r).expect("a call serialises")
            );
        }
        let _ = out.flush();
        return;
    }
    if rows.is_empty() && header {
        let _ = writeln!(out, "no calls in the log for this selection");
        return;
    }
    let flagging = args.config.is_some();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|c| {
            let mut row = vec![
                short_time(&c.at),
                cell(&match &c.for_person {
                    Some(p) => format!("{p} via {}", c.caller),
                    None => c.caller.clone(),
                }),
                tool_cell(c),
                cell(&if c.unsaid > 0 {
                    // The module kept quiet about this many more of theirs.
                    format!("{} (+{} unsaid)", c.outcome, c.unsaid)
                } else {
                    c.outcome.clone()
                }),
                c.total_us.map_or("-".into(), duration),
                format!("{}{}", seen(c.seen), if c.ambiguous { "?" } else { "" }),
            ];
            if flagging {
                row.push(match c.allowed_today {
                    Some(true) => "yes".into(),
                    Some(false) => "NO".into(),
                    None => "-".into(),
                });
            }
            row
        })
        .collect();
    let mut head: Vec<String> = ["TIME", "CALLER", "TOOL", "OUTCOME", "TOOK", "SEEN BY"]
        .map(String::from)
        .to_vec();
    if flagging {
        head.push("ALLOWED TODAY".into());
    }
    let text = table::render(&head, &cells, &[1, 2], table::width(args.wide));
    let text = if header {
        text
    } else {
        text.lines().skip(1).collect::<Vec<_>>().join("\n")
    };
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

fn seen(s: calllog::Seen) -> &'static str {
    match s {
        calllog::Seen::BusAndModule => "bus+module",
        calllog::Seen::Bus => "bus",
        calllog::Seen::Module => "module",
        calllog::Seen::Caller => "caller",
    }
}

/// The TOOL column: a tool's full name; `<module>_?` where nobody said which of the module's
/// tools, or what was said is no tool name (a module's word may name anything); `?` where
/// no module is named (a caller's report of a subject that is no tool's). No free text
/// passes for a tool, another column or another row there (issue 45).
fn tool_cell(c: &Call) -> String {
    use mesh_core::subjects::{CANCEL_VERB, TOOLS_VERB, check_module, check_tool, claim};
    if check_module(&c.module).is_err() {
        return "?".into();
    }
    match c.tool.as_deref() {
        None => format!("{}_?", c.module),
        Some(t)
            if check_tool(t).is_ok()
                || [TOOLS_VERB, CANCEL_VERB, claim::RESULT_VERB].contains(&t) =>
        {
            mesh_core::subjects::full_name(&c.module, t)
        }
        Some(_) => format!("{}_?", c.module),
    }
}

/// `2026-12-01 20:38:42.775` from an RFC 3339 time; `?` for what is no time.
fn short_time(at: &str) -> String {
    match mesh_core::subjects::calllog::parse_time(at) {
        Some(t) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.millisecond()
        ),
        None => "?".into(),
    }
}

fn duration(us: u64) -> String {
    if us < 1_000 {
        format!("{us}µs")
    } else if us < 1_000_000 {
        format!("{:.1}ms", us as f64 / 1000.0)
    } else {
        format!("{:.2}s", us as f64 / 1_000_000.0)
    }
}
