//! Command-line arguments as clap parses them.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use mesh_bus::duration::parse_duration;
use mesh_core::actor::Layout;
pub use mesh_core::client::ConnectArgs;
use mesh_core::client::EXIT_CODES_HELP;

/// A mesh of modules on a NATS bus.
#[derive(Debug, Parser)]
#[command(name = "mesh", version, about, after_help = EXIT_CODES_HELP)]
pub struct Args {
    /// Connection flags given before the command (`mesh --server X tools`); a command that
    /// connects takes them after its name too, and one that does not (up, accounts) has none.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Log to stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the tools of every registered module (or of one), and which modules did not answer
    Tools(ToolsArgs),
    /// Show a tool's description and its input and output schemas
    Describe(DescribeArgs),
    /// Call a tool: arguments as one JSON object, key=value pairs, or - for stdin
    Call(CallArgs),
    /// A call that became a task: `mesh task get ID`, `mesh task cancel ID`
    Task(super::task::TaskArgs),
    /// List the resources and resource templates of the modules you may ask
    Resources(super::resources::ResourcesArgs),
    /// Read a resource by its uri: text to stdout, binary with --json or --output FILE
    Read(super::resources::ReadArgs),
    /// List the prompts of the modules you may ask, named <module>_<prompt>
    Prompts(super::resources::PromptsArgs),
    /// Get a prompt with key=value arguments and print its messages
    Prompt(super::resources::PromptArgs),
    /// Who may call which tool, read from the nats-server configuration, with findings
    Audit(Box<AuditArgs>),
    /// Write the nats-server configuration for a grants file (modules, roles, people)
    Accounts(AccountsArgs),
    /// The catalogue: forget a module that is no longer installed
    #[command(subcommand)]
    Catalog(CatalogCommand),
    /// Serve the mesh's tools to an MCP client over stdio (stdout carries only protocol)
    Mcp(McpArgs),
    /// Serve the mesh's tools over streamable HTTP on loopback: the console
    Serve(ServeArgs),
    /// Bring a whole local mesh up on loopback until Ctrl-C: nats-server and the built-in modules
    Up(UpArgs),
    /// Sign in with your identity provider's ID token: writes (and selects) a nats context
    /// that connects with the mesh's sentinel credential and the token, then says who you are
    Login(LoginArgs),
    /// Answer a site's servers about people signing in with their ID tokens (the auth
    /// callout), with what `mesh accounts --auth operator --idp …` wrote, until Ctrl-C
    Callout(CalloutArgs),
    /// Run one built-in module against a bus until Ctrl-C
    Run(RunArgs),
    /// Print a shell completion script: `mesh completions bash > ~/.local/share/bash-completion/completions/mesh`
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print mesh's manual page (roff): `mesh man > mesh.1; man ./mesh.1`
    Man,
    /// `mesh <name> …` runs `mesh-<name> …` (beside mesh, else on PATH): `mesh decide …`
    #[command(external_subcommand)]
    External(Vec<OsString>),
}

#[derive(Debug, clap::Args)]
pub struct ToolsArgs {
    /// The connection flags, given after the command (or before it)
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Only this module
    pub module: Option<String>,
    /// Only the tools this credential may call
    #[arg(long)]
    pub mine: bool,
    /// What the modules count per tool (calls, errors by kind, cancels, latency), from the
    /// services protocol's $SRV.STATS of every instance
    #[arg(long, conflicts_with_all = ["mine", "console"])]
    pub stats: bool,
    /// Go through a running console (mesh serve) at this URL instead of the bus
    #[arg(long, value_name = "URL")]
    pub console: Option<String>,
    /// Print JSON for scripts
    #[arg(long)]
    pub json: bool,
    /// Print every description whole, however wide the terminal (through a pipe they are)
    #[arg(long)]
    pub wide: bool,
    /// How long to wait for the catalogue and the modules (e.g. 5s, 500ms)
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    /// The connection flags, given after the command (or before it)
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The tool's full name, <module>_<tool>
    pub tool: String,
    /// Go through a running console (mesh serve) at this URL instead of the bus
    #[arg(long, value_name = "URL")]
    pub console: Option<String>,
    /// Print JSON for scripts
    #[arg(long)]
    pub json: bool,
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, clap::Args)]
pub struct CallArgs {
    /// The connection flags, given after the command (or before it)
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The tool's full name, <module>_<tool>
    pub tool: String,
    /// Go through a running console (mesh serve) at this URL instead of the bus
    #[arg(long, value_name = "URL")]
    pub console: Option<String>,
    /// One JSON object, key=value pairs (each value read as the tool's input schema types it), or -
    pub args: Vec<String>,
    /// Print the whole result as JSON
    #[arg(long)]
    pub json: bool,
    /// Write the result's images, audio and blobs into DIR (default: ~/.cache/mesh/results)
    #[arg(long, value_name = "DIR")]
    pub save_to: Option<std::path::PathBuf>,
    /// How long to wait for each answer (e.g. 10s, 500ms, 2m)
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Answer an input request without asking: KEY=VALUE (a one-field form) or KEY.FIELD=VALUE
    #[arg(long = "answer", value_name = "KEY=VALUE")]
    pub answers: Vec<String>,
    /// Decline the input request KEY without asking
    #[arg(long = "decline", value_name = "KEY")]
    pub declines: Vec<String>,
    /// Let this tool answer the called tool's questions instead of you (it gets
    /// {tool, arguments, inputRequests} and answers structuredContent.inputResponses), e.g.
    /// --answer-with decide_choose for avu_apply_term's term picker
    #[arg(long, value_name = "TOOL")]
    pub answer_with: Option<String>,
    /// Print the call's way through the bus to stderr: each nats-server it crossed (their
    /// own message trace, nats-server 2.11+), each hop with its time, the module's own time
    #[arg(long, conflicts_with = "console")]
    pub trace: bool,
    /// Run the call as a task (a tool whose listing says it may) and print the task's id
    /// instead of waiting: `mesh task get ID` reads it later. A tool that runs only as a
    /// task is waited on as any call (its progress as the bar) without it
    #[arg(long, conflicts_with = "console")]
    pub detach: bool,
}

#[derive(Debug, clap::Args)]
#[command(subcommand_negates_reqs = true, args_conflicts_with_subcommands = true)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub what: Option<AuditCommand>,
    /// The connection flags, given after the command (or before it)
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The configuration nats-server runs with (in operator mode the audit follows the
    /// resolver it names, and takes its operator)
    #[arg(long, required_unless_present_any = ["resolver", "resolver_url"])]
    pub config: Option<PathBuf>,
    /// Operator mode: the account JWTs in a full resolver's directory (`<key>.jwt`)
    #[arg(long, value_name = "DIR", conflicts_with = "resolver_url")]
    pub resolver: Option<PathBuf>,
    /// Operator mode: the account JWTs a running full resolver keeps ($SYS.REQ.CLAIMS.PACK),
    /// asked as the system account's user (--creds, else `SYS.sys.creds` beside --config)
    #[arg(long, value_name = "URL")]
    pub resolver_url: Option<String>,
    /// The operator every account must be signed by: its JWT, or a file holding it (nsc's
    /// `<operator>.jwt`); by default the configuration's `operator`
    #[arg(long, value_name = "JWT|FILE")]
    pub operator: Option<String>,
    /// Operator mode: the folder of user JWTs (credential files) that say what each person
    /// and module may publish; by default `operator/creds` or `creds` beside the configuration
    #[arg(long, value_name = "DIR")]
    pub users: Option<PathBuf>,
    /// Print JSON for other tools
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print CSV (person,tool,may_call)
    #[arg(long)]
    pub csv: bool,
    /// Do not ask the bus's catalogue; audit the tools the grants name
    #[arg(long)]
    pub offline: bool,
    /// The people's limits (`mesh accounts --limits`); by default `catalog/limits.json`
    /// beside the configuration, as `mesh up` keeps it
    #[arg(long, value_name = "FILE")]
    pub limits: Option<PathBuf>,
    /// The grants file, for its profiles (the tools each offers an agent) and, in operator
    /// mode, to check that each account the server runs is what the grants would write; by
    /// default `grants.conf` beside the configuration, as `mesh up` keeps it
    #[arg(long, value_name = "FILE")]
    pub grants: Option<PathBuf>,
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, clap::Subcommand)]
pub enum AuditCommand {
    /// Who did call what: the call log nats-server keeps of every call (readable by the
    /// mesh's owner, context mesh.owner, and the grants file's auditors)
    Calls(CallsArgs),
}

#[derive(Debug, clap::Args)]
pub struct CallsArgs {
    /// The connection flags, given after the command (or before it)
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Calls since this long ago (30m, 1h, 7d) or this time (RFC 3339)
    #[arg(long, default_value = "1h", value_parser = parse_since)]
    pub since: Since,
    /// Calls by this person (or made for them by a module), or this module calling
    #[arg(long)]
    pub person: Option<String>,
    /// Calls to this module
    #[arg(long)]
    pub module: Option<String>,
    /// Calls of this tool (its full name, e.g. avu_add)
    #[arg(long)]
    pub tool: Option<String>,
    /// Calls that ended so: ok, tool_error, refused, busy, cancelled, denied, nobody, slow,
    /// gone, answered, no_reply
    #[arg(long)]
    pub outcome: Option<String>,
    /// Flag calls the permissions in this nats-server configuration would not allow today
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Also the catalogue's own traffic: registrations, listings, keys, limits, tickets
    #[arg(long)]
    pub all: bool,
    /// Keep printing calls as they come (Ctrl-C stops)
    #[arg(long)]
    pub follow: bool,
    /// Print one JSON object per call, a line each
    #[arg(long)]
    pub json: bool,
    /// Every cell whole, however wide the terminal
    #[arg(long)]
    pub wide: bool,
    /// The most records read from each of the log's streams
    #[arg(long, default_value_t = 100_000)]
    pub max: usize,
}

/// Where `--since` starts.
#[derive(Debug, Clone, Copy)]
pub enum Since {
    Ago(Duration),
    At(time::OffsetDateTime),
}

fn parse_since(s: &str) -> Result<Since, String> {
    if let Some(t) = mesh_core::subjects::calllog::parse_time(s) {
        return Ok(Since::At(t));
    }
    parse_duration(s)
        .map(Since::Ago)
        .map_err(|e| format!("{e}; or a time such as 2026-12-01T10:00:00Z"))
}

#[derive(Debug, clap::Args)]
pub struct AccountsArgs {
    /// The grants file, in nats-server's syntax: modules, roles, people
    #[arg(long)]
    pub grants: PathBuf,
    /// Client port to write into the configuration
    #[arg(long, default_value_t = 4222)]
    pub port: u16,
    /// JetStream's store directory to write into the configuration
    #[arg(long, default_value = "./jetstream")]
    pub store_dir: PathBuf,
    /// Where clients connect (an address of the host, e.g. 0.0.0.0:4222) [default: 127.0.0.1 and --port]
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Take leaf nodes (people's own servers joining as them) on this address, e.g. 0.0.0.0:7422
    #[arg(long, value_name = "ADDR")]
    pub leafnodes: Option<String>,
    /// A cluster: every server's route address, in order (host:port,host:port,...); one
    /// configuration per server is written into --out, all with the same accounts and passwords
    #[arg(long, value_name = "ROUTES", value_delimiter = ',', requires = "out")]
    pub cluster: Vec<String>,
    /// The folder written to: a cluster's configurations (nats-server-<i>.conf), or in
    /// operator mode the server's (nats-server.conf), the operator's and accounts' JWTs, every
    /// user's credential file (creds/) and the keys they were signed with (keys/, kept: run
    /// again, the same keys sign)
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// How servers know users: `file` (accounts and passwords in the configuration) or
    /// `operator` (accounts as JWTs an operator signed, a full resolver, credential files)
    #[arg(long, value_enum, default_value = "file")]
    pub auth: Auth,
    /// Operator mode: the site's own operator key (an nkey seed file, as nsc keeps it)
    /// instead of a new one kept in --out
    #[arg(long, value_name = "FILE", requires = "out", conflicts_with = "nsc")]
    pub operator_key: Option<PathBuf>,
    /// Operator mode: the operator's signing key (an nkey seed file, SO…) that signs every
    /// account, so the operator's own key can stay offline; with --nsc it must be one the
    /// operator's JWT lists. Without it a signing key is made and kept in --out
    #[arg(long, value_name = "FILE", requires = "out")]
    pub signing_key: Option<PathBuf>,
    /// Operator mode, joining a site's own operator as nsc keeps it: its store (the folder
    /// holding `<operator>.jwt` and `accounts/`, e.g. ~/.local/share/nats/nsc/stores/ACME).
    /// Its operator JWT and system account are used as they are, never signed again; the
    /// mesh's accounts are signed with a signing key of the operator's
    #[arg(long, value_name = "DIR", requires = "out")]
    pub nsc: Option<PathBuf>,
    /// Where nsc keeps its seeds (default: $NKEYS_PATH, else
    /// $XDG_DATA_HOME/nats/nsc/keys, else ~/.local/share/nats/nsc/keys)
    #[arg(long, value_name = "DIR", requires = "nsc")]
    pub nsc_keys: Option<PathBuf>,
    /// Operator mode, people from an identity provider: the callout's account (`AUTH`), its
    /// users' credential files (the service's, the sentinel's) and its keys are written too,
    /// and `PEOPLE` lists the callout's signing key; run the callout with `mesh callout`
    #[command(flatten)]
    pub idp: IdpArgs,
    /// Operator mode: also send every account JWT to the running full resolver at this URL
    /// (as the system account's user, `$SYS.REQ.CLAIMS.UPDATE`) and read each back: grants
    /// reach a cluster without a reload
    #[arg(long, value_name = "URL", requires = "out")]
    pub push: Option<String>,
    /// TLS: the server's certificate (PEM) as each host will find it; with --tls-key and
    /// --tls-ca, clients and leaf nodes must connect over TLS and a cluster's routes use
    /// mutual TLS (each server's certificate signed by --tls-ca, for serverAuth and clientAuth)
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// TLS: the server's private key (PEM), as each host will find it
    #[arg(long, value_name = "FILE", requires_all = ["tls_cert", "tls_ca"])]
    pub tls_key: Option<PathBuf>,
    /// TLS: the authority that signed every server's certificate (PEM)
    #[arg(long, value_name = "FILE", requires_all = ["tls_cert", "tls_key"])]
    pub tls_ca: Option<PathBuf>,
    /// Also write the people's limits (the grants file's `limits`) as the catalogue publishes
    /// them, and who may call what beside it (`people.json`, for the ticket issuer): put both
    /// at `<state>/catalog/` where the catalogue runs
    #[arg(long, value_name = "FILE")]
    pub limits: Option<PathBuf>,
    /// Also write each module's credential alone into this folder, `<module>.json` (a `nats`
    /// context, mode 0600), for a module run as a user of its own (docs/deploy.md)
    #[arg(long, value_name = "DIR", requires = "credentials_url")]
    pub credentials: Option<PathBuf>,
    /// The bus the credential files name, as the modules reach it (nats://a:4222,nats://b:4222)
    #[arg(long, value_name = "URLS")]
    pub credentials_url: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct LoginArgs {
    /// A file holding your OIDC ID token (as your identity provider's CLI writes it)
    #[arg(long, value_name = "FILE")]
    pub id_token: PathBuf,
    /// The mesh's state directory, whose running mesh (up.json) and sentinel credential are
    /// used unless --server and --sentinel say otherwise [default: ~/.local/state/mesh]
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The bus to sign in to [default: the running mesh up's]
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// The mesh's sentinel credential file (it may do nothing itself) [default:
    /// <dir>/operator/creds/AUTH.sentinel.creds]
    #[arg(long, value_name = "FILE")]
    pub sentinel: Option<PathBuf>,
    /// The context written and selected
    #[arg(long, default_value = "mesh")]
    pub name: String,
}

/// How a server knows its users.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Auth {
    /// Accounts, users and passwords in the configuration file
    File,
    /// Accounts and users as JWTs an operator signed, found through a resolver
    Operator,
}

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// The connection flags, given after the command (or before it)
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// How long a tool call may take before it is reported slow (below the 60 s MCP clients
    /// wait, so they hear why)
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub offer: OfferArgs,
}

/// Which tools a relay offers an agent, and how: listed, or through a search.
#[derive(Debug, Clone, clap::Args)]
pub struct OfferArgs {
    /// Offer only these tools (of those you may call): full names or patterns with * for any
    /// run of characters, comma-separated (--tools 'avu_*,decide_apply'); others are neither
    /// listed nor called
    #[arg(
        long,
        value_name = "PATTERN",
        value_delimiter = ',',
        conflicts_with = "profile"
    )]
    pub tools: Vec<String>,
    /// Offer only the tools of this profile of the grants file (profiles { NAME { tools:
    /// [PATTERN, ...] } })
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// The grants file that defines --profile [default: grants.conf in mesh up's state
    /// directory]
    #[arg(long, value_name = "FILE", requires = "profile")]
    pub grants: Option<PathBuf>,
    /// List three tools in place of the tools offered: mesh_find (by words), mesh_describe
    /// and mesh_call
    #[arg(long)]
    pub search: bool,
    /// Offer that search when more tools than this are offered
    #[arg(long, value_name = "N", default_value_t = crate::mcp::search::DEFAULT_OVER)]
    pub search_over: usize,
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The connection flags, given after the command (or before it)
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Loopback address to bind (127.0.0.1, ::1 or localhost); nothing else is accepted
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port; 0 picks a free one and prints it
    #[arg(long, default_value_t = crate::mcp::http::DEFAULT_PORT)]
    pub port: u16,
    /// How long a tool call may take before it is reported slow (below the 60 s MCP clients
    /// wait, so they hear why)
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Connections held at once; past them the least recently used idle one closes for a
    /// newcomer (503 only when all are mid-call) [default: 512, or half the open-file limit]
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Sessions (protocol versions before 2026-07-28) at once; past them the least recently
    /// used one closes for a newcomer
    #[arg(long, default_value_t = crate::mcp::http::MAX_SESSIONS)]
    pub max_sessions: usize,
    /// How long a connection may sit with nothing moving before it is closed
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub idle: Duration,
    /// How long a session may go unused before it is closed (its client must initialise again)
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub session_idle: Duration,
    #[command(flatten)]
    pub offer: OfferArgs,
}

#[derive(Debug, Subcommand)]
pub enum CatalogCommand {
    /// Remove a module from the catalogue (a running module is back at its next refresh, within about 30 s; a stopped one when it next starts)
    Forget {
        module: String,
        #[command(flatten)]
        connect: ConnectArgs,
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        timeout: Duration,
        /// Go through a running console (mesh serve) at this URL instead of the bus
        #[arg(long, value_name = "URL")]
        console: Option<String>,
    },
}

/// People signing in with an OpenID provider's ID tokens (operator mode): the auth
/// callout's settings, the same for `mesh up`, `mesh accounts` and `mesh callout`.
#[derive(Debug, Clone, clap::Args)]
pub struct IdpArgs {
    /// People may also sign in with this OpenID provider's ID tokens (operator mode): its
    /// issuer, as its tokens name it (`iss`)
    #[arg(long, value_name = "ISSUER", requires_all = ["jwks", "audience"])]
    pub idp: Option<String>,
    /// The identity provider's keys: a JWKS file, or its jwks_uri (https; http only on
    /// 127.0.0.1 or localhost), fetched at start, hourly, and when a token names a key not
    /// among them (at most once a minute)
    #[arg(long, value_name = "FILE|URL", requires = "idp")]
    pub jwks: Option<String>,
    /// The audience the identity provider's tokens must name (`aud`: the mesh's client id)
    #[arg(long, value_name = "AUD", requires = "idp")]
    pub audience: Option<String>,
    /// The token claim that names the person, as the grants file does
    #[arg(
        long,
        value_name = "CLAIM",
        default_value = "preferred_username",
        requires = "idp"
    )]
    pub claim: String,
}

/// `mesh callout`: the auth callout of a site's servers, run as a service of its own.
#[derive(Debug, clap::Args)]
pub struct CalloutArgs {
    /// The callout's folder `mesh accounts --auth operator --idp … --out DIR` wrote,
    /// DIR/callout (its own keys, creds/AUTH.callout.creds, PEOPLE's public key; a folder
    /// holding other keys is refused)
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// The grants file: who may sign in, and what each may do (SIGHUP reads it again)
    #[arg(long, value_name = "FILE")]
    pub grants: PathBuf,
    /// The servers to answer (nats://a:4222,nats://b:4222)
    #[arg(long, value_name = "URLS", env = "NATS_URL")]
    pub server: String,
    /// The authority that signed the servers' certificates (PEM), when they take clients
    /// over TLS
    #[arg(long, value_name = "FILE")]
    pub tlsca: Option<PathBuf>,
    /// The system account's user (its credential file): with it, a reread of the grants closes
    /// the sessions of people whose grants changed, who then sign in again; without it each
    /// session keeps its grants until its ID token expires
    #[arg(long, value_name = "FILE")]
    pub system_creds: Option<PathBuf>,
    #[command(flatten)]
    pub idp: IdpArgs,
}

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Where the mesh keeps its state (config, JetStream, lock) [default: ~/.local/state/mesh]
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// How the server knows its users: `file` (accounts and passwords in its configuration)
    /// or `operator` (accounts as JWTs this mesh's operator signs, a credential file per
    /// module and person, no password anywhere in the state directory)
    #[arg(long, value_enum, default_value = "file")]
    pub auth: Auth,
    #[command(flatten)]
    pub idp: IdpArgs,
    /// Client port for nats-server [default: a free one]
    #[arg(long)]
    pub port: Option<u16>,
    /// The nats-server binary [env: MESH_NATS_SERVER; default: nats-server on PATH]
    #[arg(long)]
    pub nats_server: Option<PathBuf>,
    /// Your user name on the bus [default: $USER]
    #[arg(long = "as")]
    pub person: Option<String>,
    /// Port of the console (mesh serve) [default: 7411, or a free one when that is taken]
    #[arg(long)]
    pub console_port: Option<u16>,
    /// Run this many nats-servers as one cluster on loopback (2 to 9; server i on --port + i
    /// when given): the built-in modules spread over them, the catalogue kept on three
    #[arg(long, value_name = "SERVERS", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=9))]
    pub cluster: u8,
    /// The console offers only these tools (of yours): full names or patterns with *,
    /// comma-separated, as mesh mcp --tools
    #[arg(
        long,
        value_name = "PATTERN",
        value_delimiter = ',',
        conflicts_with = "console_profile"
    )]
    pub console_tools: Vec<String>,
    /// The console offers only the tools of this profile of the grants file
    #[arg(long, value_name = "NAME")]
    pub console_profile: Option<String>,
    /// The console lists mesh_find, mesh_describe and mesh_call in place of the tools (as
    /// it does past --console-search-over tools)
    #[arg(long)]
    pub console_search: bool,
    /// The console offers that search when it offers more tools than this
    #[arg(long, value_name = "N", default_value_t = crate::mcp::search::DEFAULT_OVER)]
    pub console_search_over: usize,
    /// Do not start a mesh: have the one running from --dir apply its grants file again
    #[arg(long, conflicts_with_all = ["port", "nats_server", "person", "console_port", "cluster", "console_tools", "console_profile", "console_search"])]
    pub reload: bool,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The connection flags, given after the command (or before it)
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The built-in module to run (catalog, echo, avu, decide); with --mcp, none
    #[arg(required_unless_present = "mcp", conflicts_with = "mcp")]
    pub module: Option<String>,
    /// Serve an MCP server as module NAME: the one the command after `--` starts (stdio), or
    /// the one at --url; its tools on mesh.NAME.<tool> (`mesh run --mcp time -- uvx mcp-server-time`)
    #[arg(long, value_name = "NAME")]
    pub mcp: Option<String>,
    /// With --mcp: the MCP server's streamable HTTP endpoint, instead of a command
    #[arg(long, value_name = "URL", requires = "mcp", conflicts_with = "command")]
    pub url: Option<String>,
    /// With --url: a file of headers to send it, one `Name: value` a line (`Authorization:
    /// Bearer …`); also read from $MESH_MCP_HEADERS. Never on the command line.
    #[arg(long, value_name = "FILE", requires = "url")]
    pub headers: Option<std::path::PathBuf>,
    /// With --mcp: a server process of each caller's own, so people never share its state
    #[arg(long, requires = "mcp")]
    pub per_person: bool,
    /// With --per-person: callers' processes at most at once (the least recently used idle
    /// one makes room)
    #[arg(long, default_value_t = 16, requires = "per_person")]
    pub max_processes: usize,
    /// With --per-person: a caller's process unused this long is stopped
    #[arg(long, default_value = "5m", value_parser = parse_duration, requires = "per_person")]
    pub idle: Duration,
    /// With --per-person: a command run for each caller (MESH_CALLER names them) that prints
    /// their backend credential as JSON: {"env": {…}, "headers": {…}, "expires_in_s": N}
    #[arg(long, value_name = "COMMAND", requires = "per_person")]
    pub credential_helper: Option<std::path::PathBuf>,
    /// The MCP server's command and its arguments, after `--`
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
    /// How the bus is laid out: local (one account, nobody is identified) or accounts (an
    /// account per module, people stamped by the server; see subjects/README.md)
    #[arg(long, default_value = "local", value_parser = parse_layout)]
    pub layout: Layout,
    /// Calls handled at once
    #[arg(long, default_value_t = 256)]
    pub max_in_flight: usize,
}

fn parse_layout(s: &str) -> Result<Layout, mesh_core::actor::UnknownLayout> {
    s.parse()
}
