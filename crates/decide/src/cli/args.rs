//! `mesh-decide`'s arguments as clap parses them (also reached as `mesh decide …`).

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use mesh_core::actor::Layout;
use mesh_core::client::{ConnectArgs, EXIT_CODES_HELP};

/// The decide module: serve it, and its local tools (ontology index, lake, learning).
#[derive(Debug, Parser)]
#[command(name = "mesh-decide", bin_name = "mesh decide", version, about, after_help = EXIT_CODES_HELP)]
pub struct Args {
    /// Log to stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: DecideCommand,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// How the bus is laid out: local (one account, nobody is identified) or accounts (an
    /// account per module, people stamped by the server; see subjects/README.md)
    #[arg(long, default_value = "local", value_parser = parse_layout)]
    pub layout: Layout,
    /// Calls handled at once
    #[arg(long, default_value_t = 256)]
    pub max_in_flight: usize,
    #[command(flatten)]
    pub dir: DecideDirArg,
}

fn parse_layout(s: &str) -> Result<Layout, mesh_core::actor::UnknownLayout> {
    s.parse()
}

#[derive(Debug, Subcommand)]
pub enum DecideCommand {
    /// Serve the decide module on the bus until Ctrl-C or SIGTERM
    Run(RunArgs),
    /// The local ontology index decide searches (no network at run time)
    #[command(subcommand)]
    Ontology(OntologyCommand),
    /// The lake decide mirrors its writes into (a DuckLake of AVU events)
    #[command(subcommand)]
    Lake(LakeCommand),
    /// Learning from labels, offline: fit, promote, evaluate bundles
    #[command(subcommand)]
    Learn(LearnCommand),
}

#[derive(Debug, Subcommand)]
pub enum LearnCommand {
    /// Fit L1 and L2 for every question with enough labels; writes a new bundle version
    Fit {
        /// Labels a question needs before it is fitted
        #[arg(long, default_value_t = 20)]
        min_labels: usize,
        /// Print the report as JSON
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        dir: DecideDirArg,
    },
    /// Make a version (the newest by default) the one decide uses, unless it is worse
    Promote {
        version: Option<String>,
        /// Promote even when accuracy drops or ECE rises (recorded)
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        dir: DecideDirArg,
    },
    /// The bundle versions, their metrics, and which one is current
    List {
        #[command(flatten)]
        dir: DecideDirArg,
    },
    /// Cards with gold AVUs (X.md beside X.gold): top-1, precision and term.fits per level
    /// (L0; L1 and L2 fitted on the gold cards, each card held out; a bundle's); a folder
    /// split into dev/ and sealed/ is reported part beside part, fitted on dev only
    Eval {
        /// The folder of cards and gold files, or of a split set's dev/ and sealed/ folders
        /// (the sealed part's rows are never shown)
        #[arg(long)]
        cards: PathBuf,
        /// Which bundle to evaluate as well: current, none, or a version
        #[arg(long, default_value = "current")]
        bundle: String,
        /// The ontology index [default: decide's]
        #[arg(long)]
        index: Option<PathBuf>,
        /// Draw the reliability diagram and the accuracy–coverage curve into FILE (.svg)
        #[arg(long, value_name = "FILE")]
        plot: Option<PathBuf>,
        /// Every gold column, with what was proposed
        #[arg(long)]
        rows: bool,
        /// Rank with sentence embeddings as well (all-MiniLM-L6-v2 over each column, against
        /// the term vectors an import with --vectors stored)
        #[arg(long)]
        embed: bool,
        #[arg(long)]
        json: bool,
        /// Write the winner head fitted on every card, with its held-out figures, to FILE
        /// (decide ships crates/decide/src/winner.json, made so by bin/fit-calibration)
        #[arg(long, value_name = "FILE")]
        write_calibration: Option<PathBuf>,
        #[command(flatten)]
        dir: DecideDirArg,
    },
}

#[derive(Debug, Subcommand)]
pub enum LakeCommand {
    /// Mirror every written AVU the lake does not hold yet (after a failed mirror)
    Recover {
        #[command(flatten)]
        dir: DecideDirArg,
    },
    /// The AVUs on a path as the lake's events make them, or with --events every event
    Show {
        /// An object path; without it, every event
        path: Option<String>,
        #[command(flatten)]
        dir: DecideDirArg,
    },
}

#[derive(Debug, clap::Args)]
pub struct DecideDirArg {
    /// decide's directory (sidecar.sqlite, lake/) [default: the mesh state directory's decide/]
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Which of a term's texts `ontology import` embeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EmbedTexts {
    Labels,
    Synonyms,
    None,
}

#[derive(Debug, Subcommand)]
pub enum OntologyCommand {
    /// Import an OBO 1.4 file (.obo or .obo.gz, or its URL), replacing an earlier import of it; with
    /// --vectors, then embed its terms (but NCBITaxon's) with all-MiniLM-L6-v2 into the index
    /// (skipped with a warning when the model is not installed: see MESH_MINILM_DIR in the
    /// README)
    Import {
        /// An OBO file (.obo or .obo.gz), or its URL (http://purl.obolibrary.org/obo/pato.obo)
        #[arg(value_name = "FILE_OR_URL")]
        file: PathBuf,
        /// What to embed: nothing (the ranking uses vectors only with MESH_DECIDE_EMBED=1), each
        /// term's label, or its label and synonyms (minutes for MONDO, hours for CHEBI on 2 cores)
        #[arg(long, value_enum, default_value_t = EmbedTexts::None)]
        vectors: EmbedTexts,
        /// The most bytes a URL may send (NCBITaxon's whole taxonomy is a few GB); a gigabyte
        /// of disk is kept free whatever this says
        #[arg(long, default_value_t = 16 << 30)]
        max_bytes: u64,
        #[command(flatten)]
        index: IndexArg,
    },
    /// Search one ontology by words
    Search {
        ontology: String,
        words: Vec<String>,
        #[arg(long, default_value_t = 8)]
        limit: usize,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        index: IndexArg,
    },
    /// List the imported ontologies
    List {
        #[command(flatten)]
        index: IndexArg,
    },
}

#[derive(Debug, clap::Args)]
pub struct IndexArg {
    /// The index file [default: the mesh state directory's decide/ontology.sqlite]
    #[arg(long)]
    pub index: Option<PathBuf>,
}
