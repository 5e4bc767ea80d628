//! `mesh audit`'s table of who may read each module's resources and get its prompts.

use mesh_bus::audit::features::FeatureReach;
use mesh_core::table;

/// One row per person and module with either.
pub fn print(reach: &[FeatureReach]) {
    println!("Resources and prompts (a person with neither of a module is not listed):");
    let rows: Vec<Vec<String>> = reach
        .iter()
        .map(|r| {
            vec![
                r.person.clone(),
                r.module.clone(),
                if r.resources { "yes" } else { "-" }.to_owned(),
                r.prompts.to_owned(),
            ]
        })
        .collect();
    let header = ["PERSON", "MODULE", "RESOURCES", "PROMPTS"].map(String::from);
    table::print(&header, &rows, &[], None);
    println!(
        "  prompts: all of the module's, some (granted by name: the grants file says which), none"
    );
}
