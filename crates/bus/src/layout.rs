//! nats-server configurations for the mesh: the accounts layout from `subjects/` (an account
//! per module, one for people) and a single-account bus for development.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use mesh_core::permission::covers;
use mesh_core::subjects::features;
use mesh_core::subjects::{self, ACCOUNTS_TEMPLATE, calllog, catalog, limits, task, ticket};
pub use mesh_core::subjects::{USER_INFO, inbox_prefix};

/// Subjects every person may publish: the `tools` verbs, the `result` verbs (a result too
/// large for one message, fetched by the caller it is for only), the catalogue (its tool, its
/// listing verb, and its ticket issuer: a ticket lets a module act for the person asking
/// during one call of theirs), the server's answer to "what may I do" (nats-server 2.10+, which marks a
/// person's own tools), and the NATS services protocol (`nats micro ls|info|stats`).
pub const PUBLIC_SUBJECTS: [&str; 13] = [
    "mesh.*.tools",
    // A large result, from the instance that keeps it: `mesh.<module>.result.<instance>`.
    "mesh.*.result.*",
    // A caller giving up its call: the module takes it only from that call's stamped caller.
    "mesh.*.cancel",
    "mesh.catalog.modules",
    catalog::LISTING_SUBJECT,
    ticket::ISSUE_SUBJECT,
    // A person's client saying the call a ticket was for ended (the issuer takes it only from
    // the person the ticket names).
    ticket::ENDED_SUBJECT,
    // A person's tasks: made, read, answered and cancelled by their owner only.
    task::CREATE_SUBJECT,
    task::GET_SUBJECT,
    task::UPDATE_SUBJECT,
    task::CANCEL_SUBJECT,
    USER_INFO,
    SERVICES,
];

/// What an auditor may publish to read the call log: a direct get of each of its streams
/// (by sequence, or a batch from a time). Nobody else's grants name them.
pub const AUDIT_SUBJECTS: [&str; 3] = [
    "$JS.API.DIRECT.GET.MESH_CALLS",
    "$JS.API.DIRECT.GET.MESH_WORDS",
    "$JS.API.DIRECT.GET.MESH_REPORTS",
];

/// Every subject of the call log starts here.
const LOG_PREFIX: &str = "mesh-log";

/// The NATS services protocol's verbs, the only `$SRV` subjects a module may listen on.
pub const SERVICE_VERBS: [&str; 6] = [
    "$SRV.PING",
    "$SRV.PING.>",
    "$SRV.INFO",
    "$SRV.INFO.>",
    "$SRV.STATS",
    "$SRV.STATS.>",
];

/// The NATS services protocol's subjects.
pub const SERVICES: &str = "$SRV.>";

/// The reply subjects nats-server makes for requests that cross a service import.
pub const REPLIES: &str = "_R_.>";

/// The account people live in.
pub use mesh_core::subjects::PEOPLE_ACCOUNT;

/// How long a module's answers to one services-protocol request (`$SRV.PING|INFO|STATS`)
/// may still cross the `$SRV.>` import to the person who asked. Every instance answers, so
/// the export's responses are a stream, and nats-server keeps a stream's reply mapping —
/// one per request in every module's account, and its entry in `PEOPLE` — until this long
/// after its last answer, whatever came (two minutes unless said): a person's flood of
/// pings otherwise held them all for two minutes, hundreds of megabytes (issue 45).
/// Askers gather for half a second (`mesh stats`) or less (discovery).
pub const SERVICES_THRESHOLD: &str = "2s";

/// How long a call may run before its reply can no longer cross the import to its caller:
/// nats-server forgets a request's reply mapping after its export's response threshold,
/// two minutes unless said. Mappings of answered calls go at once, and those of unanswered
/// ones are bounded in number by the server, so a long threshold costs nothing per call.
pub const LONGEST_CALL: &str = "1h";

/// A module's progress subjects, `mesh-progress.<module>.>`.
fn progress_subjects(module: &str) -> String {
    format!("{}.{module}.>", subjects::PROGRESS_PREFIX)
}

/// What a grant reaches: every tool of a module (now and later), or one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Module(String),
    Tool(subjects::FullName),
}

impl Target {
    /// `avu` or `avu_add`, checked against the grammar.
    pub fn parse(name: &str) -> Result<Target, subjects::NameError> {
        if name.contains('_') {
            subjects::FullName::parse(name).map(Target::Tool)
        } else {
            subjects::check_module(name).map(|()| Target::Module(name.to_owned()))
        }
    }

    pub fn module(&self) -> &str {
        match self {
            Target::Module(m) => m,
            Target::Tool(t) => t.module(),
        }
    }

    /// The subject under `prefix` (`mesh` or `mesh-obo`) this grant covers.
    fn subject(&self, prefix: &str) -> String {
        match self {
            Target::Module(m) => format!("{prefix}.{m}.>"),
            Target::Tool(t) => format!("{prefix}.{}.{}", t.module(), t.tool()),
        }
    }

    /// The tool subject(s) a caller publishes on.
    pub fn tool_subject(&self) -> String {
        self.subject(subjects::PREFIX)
    }

    /// The `mesh-obo` subject(s) a module acting for people publishes on.
    pub fn obo_subject(&self) -> String {
        self.subject(subjects::OBO_PREFIX)
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Module(m) => f.write_str(m),
            // `<module>_<tool>` even for an eponymous tool: its short name (`echo`) would read
            // back as the whole module (the issuer's `may`, any list written from a grant).
            Target::Tool(t) => write!(f, "{}_{}", t.module(), t.tool()),
        }
    }
}

/// A module: its user (named like the module) in its own account `MODULE_<name>`.
#[derive(Debug, Clone)]
pub struct ModuleUser {
    pub name: String,
    pub password: String,
    /// Tools it may call as itself (the callee sees the module).
    pub calls: Vec<Target>,
    /// Tools it may call for a person (the callee sees the person, via this module).
    pub calls_for_people: Vec<Target>,
    /// Whether its account has JetStream: the catalogue's alone (its bucket). No other
    /// module's account has one, since its republish and push consumers publish without
    /// permissions, into the subjects nats-server witnesses calls on.
    pub jetstream: bool,
    /// Its tools, where known (the catalogue's registrations, `mesh up`): each exported and
    /// witnessed apart, so nats-server's event of a call names the tool and its verbs are
    /// not calls. Unknown, all of `mesh.<name>.>` is one export, witnessed as the module's.
    pub tools: Option<BTreeSet<String>>,
}

impl ModuleUser {
    /// A module with no grants; JetStream exactly for the catalogue.
    pub fn new(name: impl Into<String>, password: impl Into<String>) -> ModuleUser {
        let name = name.into();
        ModuleUser {
            jetstream: name == catalog::MODULE,
            name,
            password: password.into(),
            calls: Vec::new(),
            calls_for_people: Vec::new(),
            tools: None,
        }
    }
}

/// A person's user in the `PEOPLE` account.
#[derive(Debug, Clone)]
pub struct Person {
    pub user: String,
    pub password: String,
    /// Tool subjects (wildcards allowed) this person may call, e.g. `mesh.echo.echo`.
    pub may_call: Vec<String>,
}

/// Subjects without those another one in the set already covers: overlapping service
/// imports of one account would deliver a request twice.
fn narrowest_cover(subjects: BTreeSet<String>) -> Vec<String> {
    subjects
        .iter()
        .filter(|s| !subjects.iter().any(|o| o != *s && covers(o, s)))
        .cloned()
        .collect()
}

/// Renders `subjects/accounts.conf`. `port` -1 lets the server pick a free one. Grants that
/// name a module not in `modules` are left out (nothing could answer them).
pub fn accounts(port: i32, store_dir: &Path, modules: &[ModuleUser], people: &[Person]) -> String {
    let nobody_knows = uuid::Uuid::new_v4().simple().to_string();
    accounts_owned(port, store_dir, modules, people, &nobody_knows)
}

/// The subjects a module serves that are not tools (no call, so nothing the log records):
/// its verbs, and the catalogue's own.
fn verbs(module: &str) -> Vec<String> {
    let mut verbs = vec![
        subjects::tools_subject(module),
        subjects::cancel_subject(module),
        subjects::claim::result_subjects(module),
    ];
    // Listings and completions of its resources and prompts: verbs, not calls.
    verbs.extend(
        features::module_subjects(module)
            .into_iter()
            .filter(|(_, call)| !call)
            .map(|(s, _)| s),
    );
    if module == catalog::MODULE {
        verbs.extend(
            [
                catalog::LISTING_SUBJECT,
                ticket::ISSUE_SUBJECT,
                ticket::KEYS_SUBJECT,
                ticket::ENDED_SUBJECT,
                ticket::CURRENT_SUBJECT,
                limits::LIMITS_SUBJECT,
                task::CREATE_SUBJECT,
                task::GET_SUBJECT,
                task::UPDATE_SUBJECT,
                task::CANCEL_SUBJECT,
                task::WRITE_SUBJECT,
            ]
            .map(String::from),
        );
    }
    verbs
}

/// What a module serves besides tools and verbs that is a call: reading a resource and
/// getting a prompt (the call log has them, each under a name no tool can have).
fn feature_calls(module: &str) -> [(String, &'static str); 2] {
    [
        (
            features::resource_read_subject(module),
            features::READ_WITNESS,
        ),
        (
            features::prompt_get_subject(module, "*"),
            features::GET_WITNESS,
        ),
    ]
}

/// One service export line: `subject` answered for `accounts`, a call may run for an hour;
/// `witnessed`, nats-server's event of every request published there.
fn service_export(subject: &str, accounts: &BTreeSet<String>, witnessed: Option<&str>) -> String {
    let latency = witnessed
        .map(|w| format!(", latency: {{ sampling: 100%, subject: {} }}", quote(w)))
        .unwrap_or_default();
    format!(
        "      {{ service: {}, response: singleton, threshold: {}, accounts: {}, allow_trace: true{latency} }}\n",
        quote(subject),
        quote(LONGEST_CALL),
        list(&accounts.iter().cloned().collect::<Vec<_>>()),
    )
}

/// As [`accounts`], with the password of the mesh's owner (the user of the `MESH` account,
/// who makes the call log's streams).
pub fn accounts_owned(
    port: i32,
    store_dir: &Path,
    modules: &[ModuleUser],
    people: &[Person],
    owner_password: &str,
) -> String {
    let declared: BTreeMap<&str, &ModuleUser> =
        modules.iter().map(|m| (m.name.as_str(), m)).collect();
    let has_catalog = declared.contains_key(catalog::MODULE);
    // The tool subjects of `t`'s module a grant to `t` reaches, under `prefix`: each tool the
    // layout knows of the module, or the grant's own subject (a wildcard for a whole module
    // whose tools it does not know).
    let granted = |t: &Target, obo: bool| -> Vec<String> {
        let prefix = if obo {
            subjects::OBO_PREFIX
        } else {
            subjects::PREFIX
        };
        match (t, declared.get(t.module()).and_then(|m| m.tools.as_ref())) {
            (Target::Module(m), Some(tools)) => {
                let mut subjects: Vec<String> = tools
                    .iter()
                    .map(|tool| format!("{prefix}.{m}.{tool}"))
                    .collect();
                // The whole module: its resources and prompts too (never for people:
                // they have no `mesh-obo` twins).
                if !obo {
                    subjects.extend(features::module_subjects(m).into_iter().map(|(s, _)| s));
                }
                subjects
            }
            _ if obo => vec![t.obo_subject()],
            _ => vec![t.tool_subject()],
        }
    };
    // Who imports what from whom: exporter → importer account → subjects.
    let mut imports: BTreeMap<&str, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    // Who may call each export: exporter → subject → importer accounts.
    let mut callers: BTreeMap<&str, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    // Modules some module may reach for people: only they ask the issuer whether a ticket's
    // call still runs (`mesh.catalog.current`), and only modules granted to act for people
    // say a ticket's call ended: no other module can flood either verb.
    let reached: BTreeSet<&str> = modules
        .iter()
        .flat_map(|m| m.calls_for_people.iter().map(Target::module))
        .collect();
    for m in modules {
        let own = subjects::module_account(&m.name);
        let grants = [(&m.calls, false), (&m.calls_for_people, true)];
        for (targets, obo) in grants {
            for t in targets.iter().filter(|t| declared.contains_key(t.module())) {
                let (exporter, _) = declared.get_key_value(t.module()).expect("declared");
                let wanted = imports
                    .entry(exporter)
                    .or_default()
                    .entry(own.clone())
                    .or_default();
                wanted.extend(granted(t, obo));
                // A result too large for one message is fetched from the instance that made
                // it; a call given up is cancelled where it was made.
                wanted.insert(subjects::claim::result_subjects(exporter));
                if obo {
                    wanted.insert(subjects::obo_cancel_subject(exporter));
                } else {
                    wanted.insert(subjects::cancel_subject(exporter));
                    // What it may call, it may read the schemas of.
                    wanted.insert(subjects::tools_subject(exporter));
                }
            }
        }
        if has_catalog && m.name != catalog::MODULE {
            let entry = imports
                .entry(catalog::MODULE)
                .or_default()
                .entry(own.clone())
                .or_default();
            entry.insert(catalog::REGISTER_SUBJECT.to_owned());
            entry.insert(catalog::UNREGISTER_SUBJECT.to_owned());
            // The keys tickets are signed with, to check those that come with calls; the
            // callers' limits, to share the module fairly.
            entry.insert(ticket::KEYS_SUBJECT.to_owned());
            // A ticket's call ended (said by the module it was issued to), and whether it
            // did (asked before acting on one).
            if !m.calls_for_people.is_empty() {
                entry.insert(ticket::ENDED_SUBJECT.to_owned());
            }
            if reached.contains(m.name.as_str()) {
                entry.insert(ticket::CURRENT_SUBJECT.to_owned());
            }
            entry.insert(limits::LIMITS_SUBJECT.to_owned());
            // The state of the tasks it runs (the catalogue takes it only for its own tasks).
            entry.insert(task::WRITE_SUBJECT.to_owned());
        }
    }
    // People import every subject every module serves (their permissions say which they may
    // publish); modules what their grants name.
    for m in modules {
        let people_take = imports
            .entry(declared.get_key_value(m.name.as_str()).expect("declared").0)
            .or_default()
            .entry(PEOPLE_ACCOUNT.to_owned())
            .or_default();
        match &m.tools {
            Some(tools) => {
                people_take.extend(tools.iter().map(|t| subjects::tool_subject(&m.name, t)));
                people_take.extend(verbs(&m.name));
                people_take.extend(feature_calls(&m.name).into_iter().map(|(s, _)| s));
            }
            None => {
                people_take.insert(format!("{}.{}.>", subjects::PREFIX, m.name));
            }
        }
    }
    for (exporter, by) in &imports {
        for (importer, wanted) in by {
            for s in narrowest_cover(wanted.clone()) {
                callers
                    .entry(exporter)
                    .or_default()
                    .entry(s)
                    .or_default()
                    .insert(importer.clone());
            }
        }
    }

    let mut module_accounts = String::new();
    let mut mesh_imports = String::new();
    for m in modules {
        let own = subjects::module_account(&m.name);
        let mut publish: BTreeSet<String> = imports
            .values()
            .filter_map(|by| by.get(&own))
            .flatten()
            .cloned()
            .collect();
        // Tools granted by name stay granted by name, whatever the layout knows.
        publish.extend(m.calls.iter().map(Target::tool_subject));
        publish.extend(m.calls_for_people.iter().map(Target::obo_subject));
        if m.name != catalog::MODULE {
            // Allowed even without a catalogue, so that registering finds nobody at once
            // instead of waiting out a permission violation.
            publish.insert(catalog::REGISTER_SUBJECT.to_owned());
            publish.insert(catalog::UNREGISTER_SUBJECT.to_owned());
            publish.insert(ticket::KEYS_SUBJECT.to_owned());
            if !m.calls_for_people.is_empty() {
                publish.insert(ticket::ENDED_SUBJECT.to_owned());
            }
            if reached.contains(m.name.as_str()) {
                publish.insert(ticket::CURRENT_SUBJECT.to_owned());
            }
            publish.insert(limits::LIMITS_SUBJECT.to_owned());
            publish.insert(task::WRITE_SUBJECT.to_owned());
        } else {
            // The catalogue's runtime shares it fairly too: it asks the limits of its own
            // verb, in its own account, and the verb answers into its own inbox.
            publish.insert(limits::LIMITS_SUBJECT.to_owned());
            publish.insert(format!("{}.>", inbox_prefix(&m.name)));
        }
        // Replies: every call reaches a module across an import, so its reply subject is one
        // nats-server made (`_R_.…`, routed back only to that request's caller). Granted as a
        // subject rather than with allow_responses, whose grants a configuration reload
        // forgets for the requests in flight (their replies were then refused).
        publish.insert(REPLIES.to_owned());
        if m.jetstream {
            // The catalogue's bucket, in its own account's JetStream.
            publish.insert("$JS.>".to_owned());
            publish.insert("$KV.>".to_owned());
        }
        if m.name == catalog::MODULE {
            publish.insert(catalog::CHANGED_SUBJECT.to_owned());
        }
        // Reports of calls in flight, under its own name only.
        publish.insert(progress_subjects(&m.name));
        // That one of its resources changed, under its own name only.
        publish.insert(features::resource_updated_subject(&m.name));
        // Its word on the calls it took, and reports of calls the bus refused it: stamped
        // by nats-server on the way into the call log.
        publish.insert(calllog::WORDS_SUBJECT.to_owned());
        publish.insert(calllog::report_subject(&m.name));
        // nats-server's events of its calls are published in its account: never by it. And
        // its credential logs in as a client only: a leaf connection's reply subjects are
        // not checked as a client's are, so an answer could be routed onto those events.
        let deny = [format!("{}{LOG_PREFIX}.>", calllog::WITNESS_PREFIX)];
        // The services protocol's three verbs only: any other `$SRV` subject would be a
        // stamped way to the module that bypasses the call log.
        let mut subscribe = vec![
            format!("{}.{}.>", subjects::PREFIX, m.name),
            format!("{}.{}.>", subjects::OBO_PREFIX, m.name),
        ];
        subscribe.extend(SERVICE_VERBS.iter().map(|s| s.to_string()));
        subscribe.push(format!("{}.>", inbox_prefix(&m.name)));
        let _ = writeln!(module_accounts, "  {} {{", quote(&own));
        if m.jetstream {
            let _ = writeln!(module_accounts, "    jetstream: enabled");
        }
        let _ = writeln!(
            module_accounts,
            "    users: [\n      {{ user: {}, password: {}, allowed_connection_types: [\"STANDARD\"], permissions: {{ publish: {{ allow: {}, deny: {} }}, subscribe: {{ allow: {} }} }} }}\n    ]",
            quote(&m.name),
            quote(&m.password),
            list(&publish.into_iter().collect::<Vec<_>>()),
            list(&deny),
            list(&subscribe),
        );
        // Every call crosses one import to here; its export tracks it (the tool's own, where
        // the layout knows the tools), so nats-server's event of it lands in this account.
        let _ = writeln!(module_accounts, "    exports: [");
        let exported = callers.get(m.name.as_str()).cloned().unwrap_or_default();
        let mut witnessed: BTreeSet<String> = BTreeSet::new();
        let not_calls: BTreeSet<String> = verbs(&m.name)
            .into_iter()
            .chain([subjects::obo_cancel_subject(&m.name)])
            .collect();
        for (subject, accounts) in &exported {
            // A tool's subject, or all of the module's (`mesh.<m>.>`), is a call and tracked;
            // a verb is not. Where the layout knows the tool, its event names it.
            let obo = subject.starts_with(&format!("{}.", subjects::OBO_PREFIX));
            let last = subject.rsplit('.').next().unwrap_or_default();
            let feature = feature_calls(&m.name)
                .into_iter()
                .find(|(s, _)| s == subject)
                .map(|(_, w)| w);
            let witness = (!not_calls.contains(subject)).then(|| {
                let tool = (last != ">" && m.tools.as_ref().is_some_and(|ts| ts.contains(last)))
                    .then_some(last)
                    .or(feature);
                let w = calllog::witnessed_subject(&m.name, tool, obo);
                witnessed.insert(w.clone());
                w
            });
            module_accounts.push_str(&service_export(subject, accounts, witness.as_deref()));
        }
        // A call that crossed the module's one export before its tools were known is
        // witnessed on the module's subject when it ends — maybe after a reload exported each
        // tool apart. So that subject still reaches the log once the tools are known.
        let obo_prefix = format!("{}.", subjects::OBO_PREFIX);
        for obo in [false, true] {
            if exported
                .keys()
                .any(|s| s.starts_with(&obo_prefix) == obo && !not_calls.contains(s))
            {
                witnessed.insert(calllog::witnessed_subject(&m.name, None, obo));
            }
        }
        let _ = writeln!(
            module_accounts,
            "      {{ service: {}, response: stream, threshold: {}, accounts: [{}] }}",
            quote(SERVICES),
            quote(SERVICES_THRESHOLD),
            quote(PEOPLE_ACCOUNT),
        );
        // Progress reports go to people, each of whom may listen under their own name only;
        // its resources' updates to those who may read them.
        for stream in [
            progress_subjects(&m.name),
            features::resource_updated_subject(&m.name),
        ] {
            let _ = writeln!(
                module_accounts,
                "      {{ stream: {}, accounts: [{}] }}",
                quote(&stream),
                quote(PEOPLE_ACCOUNT),
            );
        }
        // The server's events, its words and its reports go to the call log, as streams: no
        // reply comes back across a stream import, so nothing of the log's streams answers a
        // module. The events are kept without the prefix they are published under.
        for w in &witnessed {
            let _ = writeln!(
                module_accounts,
                "      {{ stream: {}, accounts: [{}] }}",
                quote(w),
                quote(calllog::ACCOUNT),
            );
            let _ = writeln!(
                mesh_imports,
                "      {{ stream: {{ account: {}, subject: {} }}, to: {} }}",
                quote(&own),
                quote(w),
                quote(
                    w.strip_prefix(calllog::WITNESS_PREFIX)
                        .expect("a witnessed subject")
                ),
            );
        }
        for subject in [
            calllog::WORDS_SUBJECT.to_owned(),
            calllog::report_subject(&m.name),
        ] {
            let _ = writeln!(
                module_accounts,
                "      {{ stream: {}, accounts: [{}] }}",
                quote(&subject),
                quote(calllog::ACCOUNT),
            );
        }
        // Kept under its name: the mesh's import names it, not the module.
        for (theirs, kept) in [
            (
                calllog::WORDS_SUBJECT.to_owned(),
                calllog::words_subject(&m.name),
            ),
            (
                calllog::report_subject(&m.name),
                format!("{}.{own}.{}", calllog::REPORTS_PREFIX, m.name),
            ),
        ] {
            let _ = writeln!(
                mesh_imports,
                "      {{ stream: {{ account: {}, subject: {} }}, to: {} }}",
                quote(&own),
                quote(&theirs),
                quote(&kept),
            );
        }
        if m.name == catalog::MODULE {
            // What a module serves changed: relays that keep a listing hear it.
            let _ = writeln!(
                module_accounts,
                "      {{ stream: {}, accounts: [{}] }}",
                quote(catalog::CHANGED_SUBJECT),
                quote(PEOPLE_ACCOUNT),
            );
        }
        let _ = writeln!(module_accounts, "    ]");
        // What it calls, straight from the account of the module that serves it.
        let _ = writeln!(module_accounts, "    imports: [");
        for (exporter, by) in &imports {
            let Some(wanted) = by.get(&own) else {
                continue;
            };
            for s in narrowest_cover(wanted.clone()) {
                let _ = writeln!(
                    module_accounts,
                    "      {{ service: {{ account: {}, subject: {} }}, share: true }}",
                    quote(&subjects::module_account(exporter)),
                    quote(&s),
                );
            }
        }
        let _ = writeln!(module_accounts, "    ]");
        let _ = writeln!(module_accounts, "  }}");
    }

    // People's reports, under their account and the user name each may publish as.
    let _ = writeln!(
        mesh_imports,
        "      {{ stream: {{ account: {}, subject: {} }}, to: {} }}",
        quote(PEOPLE_ACCOUNT),
        quote(&calllog::report_subject("*")),
        quote(&format!("{}.{PEOPLE_ACCOUNT}.$1", calllog::REPORTS_PREFIX)),
    );
    // Reading the log, for the people whose grants name the direct gets (auditors).
    let mut mesh_exports = String::new();
    for subject in AUDIT_SUBJECTS {
        let _ = writeln!(
            mesh_exports,
            "      {{ service: {}, response: stream, accounts: [{}] }}",
            quote(subject),
            quote(PEOPLE_ACCOUNT),
        );
    }
    let mesh_account = format!(
        "  {account} {{\n    jetstream: enabled\n    users: [\n      {{ user: {owner}, password: {password}, permissions: {{ publish: {{ allow: [\"$JS.API.>\", \"_INBOX.>\"] }}, subscribe: {{ allow: [\"_INBOX.>\", \"{log}.>\"] }} }} }}\n    ]\n    exports: [\n{mesh_exports}    ]\n    imports: [\n{mesh_imports}    ]\n  }}\n",
        account = quote(calllog::ACCOUNT),
        owner = quote(calllog::OWNER),
        password = quote(owner_password),
        log = LOG_PREFIX,
    );
    module_accounts.push_str(&mesh_account);

    let mut people_users = String::new();
    for p in people {
        let mut publish = p.may_call.clone();
        publish.extend(PUBLIC_SUBJECTS.map(String::from));
        // A call the bus refused, as they saw it, into the call log under their name.
        publish.push(calllog::report_subject(&p.user));
        // Their own inbox: nats-server sends the trace of a message (`Nats-Trace-Dest`,
        // `mesh call --trace`) only where its sender may publish, and only they hear there.
        publish.push(format!("{}.>", inbox_prefix(&p.user)));
        let mut subscribe = vec![
            format!("{}.>", inbox_prefix(&p.user)),
            catalog::CHANGED_SUBJECT.to_owned(),
            format!("{}.*.{}.>", subjects::PROGRESS_PREFIX, p.user),
        ];
        // A module's resource updates, for whoever may read its resources: hearing of a
        // change is no more than reading.
        let may = mesh_core::permission::Rule {
            allow: Some(p.may_call.clone()),
            deny: Vec::new(),
        };
        subscribe.extend(
            modules
                .iter()
                .filter(|m| may.permits(&features::resource_read_subject(&m.name)))
                .map(|m| features::resource_updated_subject(&m.name)),
        );
        // Registering is for modules only (the catalogue refuses a person anyway): a grant
        // as wide as `mesh.>` does not make it a person's, so YOURS and the audit say no.
        let modules_only = [
            catalog::REGISTER_SUBJECT.to_owned(),
            catalog::UNREGISTER_SUBJECT.to_owned(),
        ];
        let _ = writeln!(
            people_users,
            "      {{ user: {}, password: {}, permissions: {{ publish: {{ allow: {}, deny: {} }}, subscribe: {{ allow: {} }} }} }}",
            quote(&p.user),
            quote(&p.password),
            list(&publish),
            list(&modules_only),
            list(&subscribe),
        );
    }
    let mut people_imports = String::new();
    if has_catalog {
        let _ = writeln!(
            people_imports,
            "      {{ stream: {{ account: {}, subject: {} }} }}",
            quote(&subjects::module_account(catalog::MODULE)),
            quote(catalog::CHANGED_SUBJECT),
        );
    }
    for m in modules {
        let account = quote(&subjects::module_account(&m.name));
        for stream in [
            progress_subjects(&m.name),
            features::resource_updated_subject(&m.name),
        ] {
            let _ = writeln!(
                people_imports,
                "      {{ stream: {{ account: {account}, subject: {} }} }}",
                quote(&stream),
            );
        }
        let _ = writeln!(
            people_imports,
            "      {{ service: {{ account: {account}, subject: {} }}, share: true }}",
            quote(SERVICES),
        );
        let wanted = imports
            .get(m.name.as_str())
            .and_then(|by| by.get(PEOPLE_ACCOUNT))
            .cloned()
            .unwrap_or_default();
        for s in narrowest_cover(wanted) {
            let _ = writeln!(
                people_imports,
                "      {{ service: {{ account: {account}, subject: {} }}, share: true }}",
                quote(&s),
            );
        }
    }
    for subject in AUDIT_SUBJECTS {
        let _ = writeln!(
            people_imports,
            "      {{ service: {{ account: {}, subject: {} }}, share: true }}",
            quote(calllog::ACCOUNT),
            quote(subject),
        );
    }
    ACCOUNTS_TEMPLATE
        .replace("@PORT@", &port.to_string())
        .replace("@STORE_DIR@", &store_dir.display().to_string())
        .replace("@MODULE_ACCOUNTS@\n", &module_accounts)
        .replace("@PEOPLE_USERS@\n", &people_users)
        .replace("@PEOPLE_IMPORTS@\n", &people_imports)
}

/// One server of a cluster, as its configuration names it.
#[derive(Debug, Clone)]
pub struct ClusterNode {
    /// The cluster's name, the same on every server.
    pub cluster: String,
    /// This server's name, unique in the cluster (JetStream places copies by it).
    pub server: String,
    /// Where this server listens for the others' routes.
    pub listen: String,
    /// Every server's route address, this one's included (nats-server skips itself).
    pub routes: Vec<String>,
    /// The secret every server of the cluster shows the others on its routes (letters and
    /// digits): without it, anyone who reaches a route port could join as a server and
    /// stamp any caller it likes.
    pub secret: String,
    /// Routes over mutual TLS: each server shows a certificate the authority signed, and
    /// takes routes only from servers that do.
    pub tls: Option<Tls>,
}

/// A server's TLS files: its certificate and key (PEM), and the authority that signed the
/// certificates of the mesh's servers (and that clients and leaf nodes check them against).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// A `tls { }` block of `tls`; with `verify`, the other side must show a certificate the
/// authority signed (mutual TLS: a cluster's routes).
pub fn tls_block(tls: &Tls, verify: bool) -> String {
    let file = |p: &Path| quote(&p.display().to_string());
    format!(
        "tls {{\n  cert_file: {}\n  key_file: {}\n  ca_file: {}\n{}  timeout: 5\n}}\n",
        file(&tls.cert),
        file(&tls.key),
        file(&tls.ca),
        if verify { "  verify: true\n" } else { "" },
    )
}

/// The user servers of a cluster log in to each other's routes as.
pub const ROUTE_USER: &str = "route";

/// A secret for a cluster's routes.
pub fn route_secret() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// What a server of a cluster adds to a configuration (the accounts layout or the single
/// account): its name and its routes, which take only servers that show the cluster's
/// secret. Every server of a cluster has the same accounts.
pub fn cluster_block(node: &ClusterNode) -> String {
    let routes: Vec<String> = node
        .routes
        .iter()
        .map(|r| format!("nats-route://{ROUTE_USER}:{}@{r}", node.secret))
        .collect();
    let tls = node
        .tls
        .as_ref()
        .map(|t| indented(&tls_block(t, true)))
        .unwrap_or_default();
    format!(
        "server_name: {}\ncluster {{\n  name: {}\n  listen: {}\n  authorization {{ user: {}, password: {} }}\n  routes: {}\n{tls}}}\n",
        quote(&node.server),
        quote(&node.cluster),
        quote(&node.listen),
        quote(ROUTE_USER),
        quote(&node.secret),
        list(&routes),
    )
}

/// A configuration `accounts` rendered for `port` on loopback, listening on `listen` (a
/// host's address, `0.0.0.0:4222`) instead: for servers on hosts of their own.
pub fn listening_on(config: &str, port: i32, listen: &str) -> String {
    config.replacen(
        &format!("listen: \"127.0.0.1:{port}\""),
        &format!("listen: {}", quote(listen)),
        1,
    )
}

/// What a server adds to take leaf nodes on `listen`: a leaf logs in as a user of the
/// accounts layout (a person's laptop, as that person) and has that user's permissions.
/// With `tls`, leaf nodes connect over TLS (they log in by password, so no certificate of
/// theirs is asked for).
pub fn leafnode_block(listen: &str, tls: Option<&Tls>) -> String {
    let tls = tls
        .map(|t| indented(&tls_block(t, false)))
        .unwrap_or_default();
    format!("leafnodes {{\n  listen: {}\n{tls}}}\n", quote(listen))
}

/// A block nested one level.
fn indented(block: &str) -> String {
    block.lines().map(|l| format!("  {l}\n")).collect()
}

/// A person's own nats-server (a laptop) that joins the mesh at `hub` (a server's leaf
/// port) as `user`: no users of its own, so whatever connects to it locally acts as that
/// person on the mesh, with that person's permissions, inbox prefix `_INBOX.<user>`.
/// With `ca`, the hub's leaf port is reached over TLS, its certificate checked against `ca`.
pub fn leaf_for_person(
    port: i32,
    hub: &str,
    user: &str,
    password: &str,
    ca: Option<&Path>,
) -> String {
    let tls = ca
        .map(|ca| format!(", tls: {{ ca_file: {} }}", quote(&ca.display().to_string())))
        .unwrap_or_default();
    format!(
        "listen: \"127.0.0.1:{port}\"\nleafnodes {{\n  remotes: [ {{ url: {}, account: \"$G\"{tls} }} ]\n}}\n",
        quote(&format!(
            "{}://{}:{}@{hub}",
            if ca.is_some() { "tls" } else { "nats-leaf" },
            userinfo(user),
            userinfo(password)
        )),
    )
}

/// A URL's user or password part: every byte but the unreserved ones percent-encoded (a
/// password given in a grants file may hold `@`, `:` or `/`).
fn userinfo(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One account, no users: a developer's bus. Modules on it run in local mode.
pub fn single_account(port: i32, store_dir: &Path) -> String {
    format!(
        "listen: \"127.0.0.1:{port}\"\njetstream {{ store_dir: {} }}\n",
        quote(&store_dir.display().to_string())
    )
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).expect("a string always serialises")
}

fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| quote(s)).collect();
    format!("[{}]", quoted.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaf_logs_in_with_its_password_whatever_it_holds() {
        let conf = leaf_for_person(-1, "hub.example.org:7422", "ann", "p@ss:w/rd%", None);
        assert!(
            conf.contains("nats-leaf://ann:p%40ss%3Aw%2Frd%25@hub.example.org:7422"),
            "{conf}"
        );
    }

    #[test]
    fn the_catalogue_may_ask_its_own_limits() {
        let conf = accounts(
            -1,
            Path::new("/tmp/js"),
            &[ModuleUser::new("catalog", "pw")],
            &[],
        );
        let user = conf
            .split("user: \"catalog\"")
            .nth(1)
            .and_then(|rest| rest.split("subscribe").next())
            .unwrap_or_default();
        assert!(
            user.contains("\"mesh.catalog.limits\"") && user.contains("\"_INBOX.catalog.>\""),
            "{conf}"
        );
    }

    #[test]
    fn accounts_fills_every_placeholder_and_grants_narrowly() {
        let mut decide = ModuleUser::new("decide", "pw");
        decide.calls_for_people = vec![Target::parse("avu").unwrap()];
        decide.calls = vec![
            Target::parse("echo").unwrap(),
            Target::parse("echo_echo").unwrap(),
        ];
        let conf = accounts(
            -1,
            Path::new("/tmp/js"),
            &[
                ModuleUser::new("catalog", "pw"),
                ModuleUser::new("echo", "pw"),
                ModuleUser::new("avu", "pw"),
                decide,
            ],
            &[Person {
                user: "alice".into(),
                password: "pw".into(),
                may_call: vec!["mesh.echo.echo".into()],
            }],
        );
        for placeholder in [
            "@PORT@",
            "@STORE_DIR@",
            "@MODULE_ACCOUNTS@",
            "@PEOPLE_USERS@",
            "@PEOPLE_IMPORTS@",
        ] {
            assert!(
                !conf.contains(placeholder),
                "{placeholder} left in:\n{conf}"
            );
        }
        // A person subscribes to their own inbox and to the catalogue's change events only.
        assert!(
            conf.contains(r#"subscribe: { allow: ["_INBOX.alice.>", "mesh.catalog.changed", "mesh-progress.*.alice.>"] }"#),
            "{conf}"
        );
        // Progress: each module reports under its own name, to people only.
        assert!(conf.contains(r#"{ stream: "mesh-progress.echo.>", accounts: ["PEOPLE"] }"#));
        assert!(conf.contains(
            r#"{ stream: { account: "MODULE_echo", subject: "mesh-progress.echo.>" } }"#
        ));
        assert_eq!(
            conf.matches(r#""mesh-progress.echo.>""#).count(),
            3,
            "{conf}"
        );
        // A call may run an hour: its reply mapping outlives nats-server's two minutes. It
        // crosses one import, straight into the module's account, whose export witnesses it.
        assert!(conf.contains(r#"{ service: "mesh.echo.>", response: singleton, threshold: "1h", accounts: ["MODULE_decide", "PEOPLE"], allow_trace: true, latency: { sampling: 100%, subject: "_R_.mesh-log.calls.echo" } }"#), "{conf}");
        assert!(conf.contains(
            r#"{ stream: { account: "MODULE_catalog", subject: "mesh.catalog.changed" } }"#
        ));
        // The services protocol's answers cross for two seconds only: a person's flood of
        // pings is not kept two minutes in every module's account (issue 45).
        assert_eq!(
            conf.matches(
                r#"{ service: "$SRV.>", response: stream, threshold: "2s", accounts: ["PEOPLE"] }"#
            )
            .count(),
            4,
            "{conf}"
        );
        // Only the module granted it imports avu's mesh-obo subjects, from avu's account.
        assert_eq!(
            conf.matches(
                r#"{ service: { account: "MODULE_avu", subject: "mesh-obo.avu.>" }, share: true }"#
            )
            .count(),
            1
        );
        assert!(conf.contains(r#"{ service: "mesh-obo.avu.>", response: singleton, threshold: "1h", accounts: ["MODULE_decide"], allow_trace: true, latency: { sampling: 100%, subject: "_R_.mesh-log.obo.avu" } }"#), "{conf}");
        // The events go to the log's account, kept without the prefix.
        assert!(conf.contains(r#"{ stream: { account: "MODULE_echo", subject: "_R_.mesh-log.calls.echo" }, to: "mesh-log.calls.echo" }"#), "{conf}");
        // No module publishes there itself.
        assert!(conf.contains(r#"deny: ["_R_.mesh-log.>"]"#), "{conf}");
        // echo is inside echo's wildcard: one import, not two.
        assert!(!conf.contains(r#"subject: "mesh.echo.echo""#), "{conf}");
        // No service crosses the log's account.
        assert!(
            !conf.contains(r#"account: "MESH", subject: "mesh."#),
            "{conf}"
        );
        // JetStream for the catalogue's account and the call log's alone.
        assert_eq!(conf.matches("jetstream").count(), 3, "{conf}");
        assert_eq!(conf.matches("jetstream: enabled").count(), 2);
        let parsed = crate::natsconf::parse_str(&conf, Path::new("gen.conf")).unwrap();
        crate::audit::Model::read(&parsed).unwrap();
    }

    #[test]
    fn known_tools_are_exported_and_witnessed_each_and_verbs_are_not_calls() {
        let mut echo = ModuleUser::new("echo", "pw");
        echo.tools = Some(["echo", "sleep"].map(String::from).into());
        let mut weather = ModuleUser::new("weather", "pw");
        weather.calls = vec![Target::parse("echo").unwrap()];
        let conf = accounts(
            -1,
            Path::new("/tmp/js"),
            &[echo, weather],
            &[Person {
                user: "alice".into(),
                password: "pw".into(),
                may_call: vec!["mesh.echo.>".into()],
            }],
        );
        for tool in ["echo", "sleep"] {
            assert!(conf.contains(&format!(r#"{{ service: "mesh.echo.{tool}", response: singleton, threshold: "1h", accounts: ["MODULE_weather", "PEOPLE"], allow_trace: true, latency: {{ sampling: 100%, subject: "_R_.mesh-log.calls.echo.{tool}" }} }}"#)), "{conf}");
            assert!(conf.contains(&format!(r#"{{ service: {{ account: "MODULE_echo", subject: "mesh.echo.{tool}" }}, share: true }}"#)));
        }
        // The verbs are exported apart, and nobody's use of them is a call.
        for verb in ["mesh.echo.tools", "mesh.echo.cancel", "mesh.echo.result.*"] {
            assert!(conf.contains(&format!(r#"{{ service: "{verb}", response: singleton, threshold: "1h", accounts: ["MODULE_weather", "PEOPLE"], allow_trace: true }}"#)), "{verb}: {conf}");
        }
        assert!(!conf.contains(r#""mesh.echo.>", response"#), "{conf}");
        assert!(
            conf.contains(r#"{ stream: "_R_.mesh-log.calls.echo.sleep", accounts: ["MESH"] }"#)
        );
        // A call begun before the tools were known ends witnessed as the module's: still kept.
        assert!(conf.contains(r#"{ stream: "_R_.mesh-log.calls.echo", accounts: ["MESH"] }"#));
        assert!(conf.contains(r#"{ stream: { account: "MODULE_echo", subject: "_R_.mesh-log.calls.echo" }, to: "mesh-log.calls.echo" }"#));
        assert!(!conf.contains("_R_.mesh-log.obo.echo"), "{conf}");
        let parsed = crate::natsconf::parse_str(&conf, Path::new("gen.conf")).unwrap();
        crate::audit::Model::read(&parsed).unwrap();
    }
}
