//! The first hour, as a newcomer meets it: `bin/deps.sh`'s steps from a clean HOME without
//! `$USER`, with a system Python that refuses pip (PEP 668), then README.md's own commands,
//! read from README.md, against the mesh they bring up, each held to what README says it
//! does (exit codes, answers, decide's sample output), so README cannot drift from the code.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The system's own Python, which refuses `pip install` (Debian 12 and later, Ubuntu 23.04
/// and later mark it with `EXTERNALLY-MANAGED`).
const SYSTEM_PYTHON: &str = "/usr/bin/python3";

fn checkout() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory `cargo test` built the binaries into (`mesh`, and `mesh-decide` beside it).
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_mesh"))
        .parent()
        .unwrap()
        .to_owned()
}

/// A newcomer's machine: a clean HOME, no `$USER`, `PATH` of the system's directories with
/// `python3` the system's (and, for the mesh, `bin` first), and stand-ins for `apt-get`,
/// `sudo`, `pip` and `pip3` that record being run: nothing may install into the system.
struct Machine {
    _dir: tempfile::TempDir,
    home: PathBuf,
    fake: PathBuf,
    forbidden: PathBuf,
}

impl Machine {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let fake = dir.path().join("fakebin");
        let forbidden = dir.path().join("forbidden.log");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&fake).unwrap();
        for tool in ["apt-get", "apt", "sudo", "pip", "pip3"] {
            let script = format!(
                "#!/bin/sh\necho \"{tool} $*\" >> '{}'\nexit 1\n",
                forbidden.display()
            );
            write_executable(&fake.join(tool), &script);
        }
        std::os::unix::fs::symlink(SYSTEM_PYTHON, fake.join("python3")).unwrap();
        // cargo, where rustup put it: bin/up's first check is that it is there.
        let cargo = std::env::var("CARGO").expect("cargo test sets CARGO");
        std::os::unix::fs::symlink(cargo, fake.join("cargo")).unwrap();
        Machine {
            _dir: dir,
            home,
            fake,
            forbidden,
        }
    }

    fn path(&self) -> String {
        format!(
            "{}:{}:/usr/bin:/bin",
            bin_dir().display(),
            self.fake.display()
        )
    }

    /// A command as this machine's user runs it: only HOME, PATH and a locale set.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("HOME", &self.home)
            .env("PATH", self.path())
            .env("LANG", "C.UTF-8")
            // pip's download cache, shared between runs of this test only to spare the
            // network: what is installed, and where, is as on a fresh machine.
            .env("PIP_CACHE_DIR", target_dir().join("pip-cache"))
            .env("npm_config_cache", target_dir().join("npm-cache"))
            .current_dir(checkout());
        cmd
    }

    fn bash(&self, script: &str) -> Output {
        self.command("bash")
            .args(["-c", script])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn nothing_installed_into_the_system(&self) {
        let ran = std::fs::read_to_string(&self.forbidden).unwrap_or_default();
        assert!(ran.is_empty(), "installed into the system: {ran}");
    }
}

/// The development checkout README's `../shared/ontologies` lines are for: this one, or,
/// for CI's clean clone, the checkout it was cloned from.
fn development_checkout() -> PathBuf {
    let has_shared = |dir: &Path| dir.join("../shared/ontologies/pato.obo.gz").is_file();
    if has_shared(&checkout()) {
        return checkout();
    }
    let origin = Command::new("git")
        .args(["config", "--get", "remote.origin.url"])
        .current_dir(checkout())
        .output()
        .ok()
        .map(|o| PathBuf::from(text(&o.stdout).trim()));
    match origin {
        Some(dir) if dir.is_absolute() && has_shared(&dir) => dir,
        _ => panic!(
            "README's decide tour needs the shared ontologies at ../shared/ontologies of this \
             checkout or of the one it was cloned from"
        ),
    }
}

fn target_dir() -> PathBuf {
    bin_dir().parent().unwrap().to_owned()
}

fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The lines of the first fenced block after `marker` in README.md.
fn block_after(readme: &str, marker: &str) -> Vec<String> {
    let at = readme
        .find(marker)
        .unwrap_or_else(|| panic!("README.md no longer says {marker:?}"));
    let rest = &readme[at..];
    let open = rest.find("```").expect("a fenced block follows");
    let body = &rest[open..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let close = body.find("\n```").expect("the block ends");
    body[..close].lines().map(str::to_owned).collect()
}

/// A README command line: the command, and the comment after it.
fn split_comment(line: &str) -> (String, String) {
    // A comment starts at "  #" (commands quote JSON but never hold that).
    match line.find("  #") {
        Some(at) => (
            line[..at].trim().to_owned(),
            line[at + 3..].trim().to_owned(),
        ),
        None => (line.trim().to_owned(), String::new()),
    }
}

/// The exit code a README comment names first ("4: denied"), else 0.
fn expected_code(comment: &str) -> i32 {
    comment
        .split(':')
        .next()
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or(0)
}

/// A running `mesh up` as `bin/up` ends: `exec target/release/mesh up` with the nats-server
/// `bin/deps.sh` chose.
struct Up {
    child: Child,
    console: String,
    /// Where its stderr goes: what it says of modules and reloads.
    said: PathBuf,
}

impl Up {
    fn start(machine: &Machine, nats_server: &str) -> Up {
        let said = machine.home.join("mesh-up.stderr");
        let mut child = machine
            .command(env!("CARGO_BIN_EXE_mesh"))
            .args(["up", "--port", "0", "--console-port", "0"])
            .env("MESH_NATS_SERVER", nats_server)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&said).unwrap())
            .process_group(0)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    // Keep reading so that mesh up never blocks on a full pipe.
                    continue;
                }
            }
        });
        let mut console = None;
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(120))
                .expect("mesh up comes up");
            if let Some(url) = line.trim().strip_prefix("console:") {
                console = url.split_whitespace().next().map(str::to_owned);
            }
            if line.starts_with("Ctrl-C stops everything") {
                break;
            }
        }
        Up {
            child,
            console: console.expect("mesh up names the console"),
            said,
        }
    }

    /// Waits until mesh up's stderr says `what` (a minute at most: only a hang fails here).
    fn says(&self, what: &str) -> String {
        let since = Instant::now();
        loop {
            let said = std::fs::read_to_string(&self.said).unwrap_or_default();
            if said.contains(what) {
                return said;
            }
            assert!(
                since.elapsed() < Duration::from_secs(60),
                "mesh up never said {what:?}:\n{said}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Ctrl-C as a terminal sends it, to the whole process group.
    fn stop(mut self) {
        let group = self.child.id() as i32;
        // SAFETY: signalling our own child's process group.
        unsafe { libc::kill(-group, libc::SIGINT) };
        let status = self.child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "mesh up stops cleanly on Ctrl-C");
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        // A failed assertion must not leave the mesh running.
        // SAFETY: signalling our own child's process group.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
    }
}

/// Runs one README command line as a person would: in bash, with the block's earlier
/// assignments (`ME=…`); on a terminal when its comment speaks of one (typing `1` where it
/// asks); and holds it to the exit code its comment names.
fn run_line(machine: &Machine, up: &Up, assignments: &[String], line: &str) -> String {
    let (cmd, comment) = split_comment(line);
    let cmd = cmd.replace("http://127.0.0.1:7411/mcp", &up.console);
    let script = format!("{}\n{cmd}", assignments.join("\n"));
    let want = expected_code(&comment);
    let (code, said) = if comment.contains("terminal") {
        let mut command = machine.command("bash");
        command.args(["-c", &script]);
        let typed = if comment.contains("asks you") {
            "1\n"
        } else {
            ""
        };
        let t = crate::pty::run_typing(&mut command, 100, 30, typed);
        (t.code, t.output)
    } else {
        let out = machine.bash(&script);
        (
            out.status.code().unwrap_or(-1),
            format!("{}{}", text(&out.stdout), text(&out.stderr)),
        )
    };
    assert_eq!(
        code, want,
        "README: `{line}` exits {want}; it exited {code}:\n{said}"
    );
    said
}

/// Every README line of a block that is a command: not blank, not only a comment.
fn commands(block: &[String]) -> impl Iterator<Item = &String> {
    block
        .iter()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
}

/// Run ids, group ids and such: 32 hex digits, which differ on every run.
fn without_ids(text: &str) -> String {
    let mut out = String::new();
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.len() == 32 {
            out.push_str("<id>");
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in text.chars() {
        if c.is_ascii_hexdigit() && c.is_ascii_lowercase() || c.is_ascii_digit() {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

#[test]
fn the_first_hour_from_a_clean_home_follows_the_readme() {
    let python_refuses = Command::new(SYSTEM_PYTHON)
        .args([
            "-c",
            "import os, sysconfig; print(os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))",
        ])
        .output()
        .expect("this test needs the system's python3 at /usr/bin/python3");
    assert_eq!(
        text(&python_refuses.stdout).trim(),
        "True",
        "this test needs a system python3 that refuses pip (PEP 668, Debian 12 and later) at {SYSTEM_PYTHON}"
    );
    let readme = std::fs::read_to_string(checkout().join("README.md")).unwrap();
    let machine = Machine::new();

    // bin/up's steps, in a copy of the project of its own (the prebuilt DuckDB and the model
    // are linked in: 100 MB this test does not download again).
    let project = machine.home.join("mesh");
    std::fs::create_dir_all(project.join("bin")).unwrap();
    std::fs::create_dir_all(project.join("target")).unwrap();
    std::fs::copy(checkout().join("bin/deps.sh"), project.join("bin/deps.sh")).unwrap();
    for linked in ["duckdb", "models"] {
        std::os::unix::fs::symlink(
            checkout().join("target").join(linked),
            project.join("target").join(linked),
        )
        .unwrap();
    }
    let steps = machine
        .command("bash")
        .args([
            "-c",
            ". bin/deps.sh && require_prerequisites && ensure_nats_server && ensure_duckdb \
             && ensure_minilm && echo \"$MESH_NATS_SERVER\"",
        ])
        .current_dir(&project)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = text(&steps.stderr);
    assert!(steps.status.success(), "bin/up's steps: {said}");
    assert!(!said.contains("externally-managed"), "{said}");
    machine.nothing_installed_into_the_system();
    let nats_server = text(&steps.stdout).trim().to_owned();
    assert_eq!(
        Path::new(&nats_server),
        project.join("target/tools/bin/nats-server"),
        "nats-server goes into the project's own virtualenv: {said}"
    );

    // Without cargo, the first thing said is that it is missing, before any download.
    std::fs::remove_file(machine.fake.join("cargo")).unwrap();
    let no_cargo = machine
        .command("bash")
        .args(["-c", ". bin/deps.sh && require_prerequisites"])
        .current_dir(&project)
        .output()
        .unwrap();
    assert!(!no_cargo.status.success());
    assert!(
        text(&no_cargo.stderr).contains("cargo (Rust"),
        "{}",
        text(&no_cargo.stderr)
    );

    let up = Up::start(&machine, &nats_server);
    let account = text(&Command::new("id").arg("-un").output().unwrap().stdout)
        .trim()
        .to_owned();

    // The tour, line by line, each with the exit code README gives it.
    for line in commands(&block_after(&readme, "## A five-minute tour")) {
        let said = run_line(&machine, &up, &[], line);
        if line.contains("echo_whoami") {
            assert!(said.contains(&format!("{account}@PEOPLE")), "{said}");
        }
        if line.contains("echo_choose") && line.contains("asks you") {
            assert!(said.contains("red"), "the first option was chosen: {said}");
        }
    }
    // natscli is optional: each `nats` line names what does the same without it.
    for line in commands(&block_after(&readme, "With natscli")) {
        let (_, comment) = split_comment(line);
        let without = comment
            .split("without: ")
            .nth(1)
            .unwrap_or_else(|| panic!("README: `{line}` names no equivalent without natscli"));
        for equivalent in without.split(", ") {
            run_line(&machine, &up, &[], equivalent);
        }
    }

    // decide: the ontologies, then the README card, whose output README shows. The line
    // for a development checkout runs where `../shared/ontologies` is.
    let dev = development_checkout();
    for line in commands(&block_after(&readme, "the three above, from there")) {
        let (cmd, _) = split_comment(line);
        let out = machine
            .command("bash")
            .args(["-c", &cmd])
            .current_dir(&dev)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "README: `{line}`: {}",
            text(&out.stderr)
        );
    }
    let annotate = commands(&block_after(
        &readme,
        "Dataset cards, the input decide reads",
    ))
    .next()
    .unwrap()
    .clone();
    let (annotate, _) = split_comment(&annotate);
    let out = machine.bash(&annotate);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let real = without_ids(&text(&out.stdout));
    let real: Vec<&str> = real.lines().collect();
    let sample = block_after(&readme, "annotate prints");
    let sample: Vec<String> = sample.iter().map(|l| without_ids(l)).collect();
    let cut = sample
        .iter()
        .position(|l| l == "...")
        .expect("the sample cuts its middle with ...");
    let (head, tail) = (&sample[..cut], &sample[cut + 1..]);
    assert_eq!(
        &real[..head.len()],
        head,
        "README's decide sample is what annotate prints (its start)"
    );
    assert_eq!(
        &real[real.len() - tail.len()..],
        tail,
        "README's decide sample is what annotate prints (its end)"
    );

    // avu, as README writes it: `$ME` is your name on the mesh without `$USER`.
    let avu = block_after(&readme, "every change lands in an append-only history");
    let mut assignments = Vec::new();
    for line in commands(&avu) {
        let (cmd, _) = split_comment(line);
        if cmd
            .split('=')
            .next()
            .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        {
            assignments.push(cmd);
            continue;
        }
        let said = run_line(&machine, &up, &assignments, line);
        if line.contains("avu_list") {
            assert!(said.contains("HARV"), "{said}");
        }
    }

    // Add your own module: its venv from the system's Python, the grants file's line, a
    // reload, the module, and what README says of it.
    for line in commands(&block_after(
        &readme,
        "which goes into a virtualenv of its own",
    )) {
        run_line(&machine, &up, &[], line);
    }
    machine.nothing_installed_into_the_system();
    let grants = machine.home.join(".local/state/mesh/grants.conf");
    let conf = std::fs::read_to_string(&grants).unwrap();
    assert!(
        conf.contains("# units {}"),
        "README: the grants file has a commented line for units:\n{conf}"
    );
    std::fs::write(&grants, conf.replace("# units {}", "units {}")).unwrap();
    let reload = machine.bash("mesh up --reload");
    assert!(reload.status.success(), "{}", text(&reload.stderr));
    let start = "~/.local/share/mesh-py/bin/python examples/python/units.py --context mesh-units";
    assert!(
        readme
            .replace("`~/", "~/")
            .replace("\n   ", " ")
            .contains(start),
        "README starts units with {start:?}"
    );
    let mut units = machine
        .command("bash")
        .args(["-c", &format!("exec {start}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let since = Instant::now();
    while !text(&machine.bash("mesh tools").stdout).contains("units_convert") {
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "units is listed once it runs"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let converted = machine.bash("mesh call units_convert value=100 from=cm to=m");
    assert!(converted.status.success(), "{}", text(&converted.stderr));
    assert!(
        readme.contains("answers `100 cm = 1 m`")
            && text(&converted.stdout).contains("100 cm = 1 m"),
        "{}",
        text(&converted.stdout)
    );
    for (script, code) in [
        ("mesh --context mesh-units call echo text=hi", 4),
        (
            "mesh --context mesh-guest call units_convert value=1 from=m to=cm",
            4,
        ),
    ] {
        let out = machine.bash(script);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{script}: {}",
            text(&out.stderr)
        );
    }
    units.kill().unwrap();
    let _ = units.wait();

    bring_an_mcp_server(&machine, &up, &readme);
    up.stop();
    machine.nothing_installed_into_the_system();
}

/// Waits until `mesh tools` lists `tool` (a minute at most: only a hang fails here).
fn listed(machine: &Machine, tool: &str) {
    let since = Instant::now();
    while !text(&machine.bash("mesh tools").stdout).contains(tool) {
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "{tool} is listed once its module runs"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// README's "Bring an MCP server": its virtualenv, its line in the grants file and the
/// reload that starts it; then a server that cannot start, said at once in mesh up's
/// output and stopped by the reload that takes it out; then one run by hand, as README
/// runs server-everything, and `mesh call` on its image.
fn bring_an_mcp_server(machine: &Machine, up: &Up, readme: &str) {
    let home = machine.home.to_str().unwrap();
    let grants = machine.home.join(".local/state/mesh/grants.conf");
    let declare = |line: &str| {
        let conf = std::fs::read_to_string(&grants).unwrap();
        let at = conf
            .find("modules {")
            .expect("the grants file declares modules")
            + 9;
        std::fs::write(&grants, format!("{}\n  {line}{}", &conf[..at], &conf[at..])).unwrap();
    };
    let time = block_after(readme, "An MCP server you already run joins the mesh")
        .into_iter()
        .find(|l| l.contains("mcp_server_time"))
        .expect("README declares time with its command");
    declare(&time.trim().replace("/home/you", home));
    for line in commands(&block_after(readme, "a virtualenv of\nits own does it")) {
        if line.starts_with("mesh call") {
            listed(machine, "time_get_current_time");
        }
        let said = run_line(machine, up, &[], line);
        if line.starts_with("mesh up --reload") {
            assert!(
                said.contains("started time"),
                "{said}\nmesh up said:\n{}",
                std::fs::read_to_string(&up.said).unwrap_or_default()
            );
        }
        if line.starts_with("mesh call") {
            assert!(said.contains("UTC"), "{said}");
        }
    }
    machine.nothing_installed_into_the_system();

    // A server that cannot start: its own words, in mesh up's output, at once.
    declare(&format!(
        r#"broken {{ command: ["{home}/.venvs/mcp/bin/python", "-m", "mcp_server_nonexistent"] }}"#
    ));
    let reload = machine.bash("mesh up --reload");
    assert!(
        text(&reload.stdout).contains("started broken"),
        "{}",
        text(&reload.stdout)
    );
    up.says("No module named mcp_server_nonexistent");
    let conf = std::fs::read_to_string(&grants).unwrap();
    let without: String = conf
        .lines()
        .filter(|l| !l.contains("broken {"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&grants, without).unwrap();
    let reload = machine.bash("mesh up --reload");
    assert!(
        text(&reload.stdout).contains("stopped broken (no longer declared)"),
        "{}",
        text(&reload.stdout)
    );

    // One run by hand, as README runs it, and an image it answers.
    declare("everything {}");
    let reload = machine.bash("mesh up --reload");
    assert!(reload.status.success(), "{}", text(&reload.stderr));
    let run = block_after(readme, "and run it yourself")
        .into_iter()
        .find(|l| l.contains("server-everything"))
        .expect("README runs server-everything with mesh run --mcp");
    let (run, _) = split_comment(&run);
    let mut everything = machine
        .command("bash")
        .args(["-c", &format!("exec {run}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    listed(machine, "everything_get_tiny_image");
    let image = machine.bash("mesh call everything_get_tiny_image");
    assert!(image.status.success(), "{}", text(&image.stderr));
    let said = text(&image.stdout);
    let path = said
        .lines()
        .find_map(|l| l.strip_prefix("[image, image/png, "))
        .and_then(|rest| rest.split("] ").nth(1))
        .unwrap_or_else(|| panic!("mesh call names the image's file: {said}"));
    assert!(
        path.starts_with(&format!(
            "{home}/.cache/mesh/results/everything_get_tiny_image-"
        )),
        "{path}"
    );
    assert_eq!(&std::fs::read(path).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
    // SAFETY: signalling our own child's process group.
    unsafe { libc::kill(-(everything.id() as i32), libc::SIGTERM) };
    let _ = everything.wait();
}
