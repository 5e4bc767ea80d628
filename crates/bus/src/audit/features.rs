//! Who may read which module's resources and get its prompts, read from the same
//! permissions as the tools: for each person and each audited module, whether its resources
//! are theirs (`mesh.<m>.resources.read`), and its prompts all (`mesh.<m>.prompts.get.*`
//! as a whole: a wildcard grant), some (the listing, with prompts granted by name) or none.

use serde::Serialize;

use super::model::{Model, User};
use mesh_core::subjects::features;

/// One person's reach into one module's resources and prompts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FeatureReach {
    pub person: String,
    pub module: String,
    pub resources: bool,
    /// `all`, `some` (prompts granted by name: which, the grants file says) or `none`.
    pub prompts: &'static str,
}

/// Every person's reach into every module's resources and prompts, leaving out the pairs
/// with none of either.
pub fn reach(model: &Model, people: &[&User], modules: &[String]) -> Vec<FeatureReach> {
    let mut out = Vec::new();
    for p in people {
        for m in modules {
            let resources = model.may_call(p, &features::resource_read_subject(m));
            // A literal `*` token is matched only by a wildcard in the grant.
            let prompts = if model.may_call(p, &features::prompt_get_subject(m, "*")) {
                "all"
            } else if model.may_call(p, &features::prompts_list_subject(m)) {
                "some"
            } else {
                "none"
            };
            if resources || prompts != "none" {
                out.push(FeatureReach {
                    person: p.id(),
                    module: m.clone(),
                    resources,
                    prompts,
                });
            }
        }
    }
    out
}
