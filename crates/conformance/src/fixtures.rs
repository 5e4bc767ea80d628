//! The conformance suite's resources, resource template and prompts, served by module
//! `test` beside its tools: the relay lists a prompt `simple_prompt` of module `test` as
//! `test_simple_prompt`, the name the suite asks for.

use mesh_core::runtime::{
    Module, Prompt, Resource, ResourceTemplate, prompt_input_required, prompt_result, text_contents,
};
use mesh_core::subjects::ToolResult;
use mesh_core::subjects::features::FeatureError;
use serde_json::{Value, json};

use crate::PNG;

/// `module` with the suite's resources and prompts, and completions of their arguments.
pub fn beside(module: Module) -> Module {
    module
        .resource(
            Resource::text(
                "test://static-text",
                "static-text",
                "text/plain",
                "This is the content of the static text resource.",
            )
            .description("A static text resource for testing"),
        )
        .resource(
            Resource::new("test://static-binary", "static-binary", |_| async {
                Ok(vec![json!({"uri": "test://static-binary", "mimeType": "image/png", "blob": PNG})])
            })
            .mime_type("image/png")
            .description("A static binary resource (image) for testing"),
        )
        .resource(
            Resource::text(
                "test://watched-resource",
                "watched-resource",
                "text/plain",
                "Watched resource content",
            )
            .description("A resource for subscription testing"),
        )
        .resource_template(
            ResourceTemplate::new("test://template/{id}/data", "template", |read| async move {
                let id = read.variables.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
                let data = json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                Ok(vec![text_contents(&read.uri, "application/json", &data.to_string())])
            })
            .mime_type("application/json")
            .description("A resource template with parameter substitution"),
        )
        .prompt(Prompt::new("simple_prompt", "A simple prompt without arguments", |_| async {
            Ok(prompt_result(None, vec![("user", json!({"type": "text", "text": "This is a simple prompt for testing."}))]))
        }))
        .prompt(
            Prompt::new("prompt_with_arguments", "A prompt with required arguments", |call| async move {
                let arg = |k: &str| call.arguments.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
                let text = format!("Prompt with arguments: arg1='{}', arg2='{}'", arg("arg1"), arg("arg2"));
                Ok(prompt_result(None, vec![("user", json!({"type": "text", "text": text}))]))
            })
            .argument("arg1", "First test argument", true)
            .argument("arg2", "Second test argument", true),
        )
        .prompt(
            Prompt::new("prompt_with_embedded_resource", "A prompt with an embedded resource", |call| async move {
                let uri = call.arguments.get("resourceUri").and_then(Value::as_str).unwrap_or("test://example-resource").to_owned();
                Ok(prompt_result(None, vec![
                    ("user", json!({"type": "resource", "resource": {
                        "uri": uri, "mimeType": "text/plain", "text": "Embedded resource content for testing."
                    }})),
                    ("user", json!({"type": "text", "text": "Please process the embedded resource above."})),
                ]))
            })
            .argument("resourceUri", "URI of the resource to embed", true),
        )
        .prompt(Prompt::new("prompt_with_image", "A prompt with image content", |_| async {
            Ok(prompt_result(None, vec![
                ("user", json!({"type": "image", "data": PNG, "mimeType": "image/png"})),
                ("user", json!({"type": "text", "text": "Please analyze the image above."})),
            ]))
        }))
        // Asks first, as a tool asks (SEP-2322 on a request that is no tool call): the
        // answer comes back in a second get, with `inputResponses`.
        .prompt(Prompt::new("input_required_result_prompt", "A prompt that asks for context first", |call| async move {
            let answered = call
                .continuation
                .as_ref()
                .and_then(|c| c.input_responses.as_ref())
                .and_then(|r| r.get("user_context"))
                .and_then(|a| a.pointer("/content/context"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            Ok(match answered {
                Some(context) => prompt_result(None, vec![("user", json!({"type": "text", "text": format!("A prompt for the context: {context}")}))]),
                None => prompt_input_required(
                    [("user_context".to_owned(), ToolResult::elicitation(
                        "What context should the prompt use?",
                        json!({"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}),
                    ))]
                    .into_iter()
                    .collect(),
                    None,
                ),
            })
        }))
        .completion(|c| async move {
            let words = ["paris", "park", "party", "test", "testing"];
            if c.argument.is_empty() {
                return Err(FeatureError::invalid("a completion names its argument"));
            }
            Ok(words.iter().filter(|w| w.starts_with(&c.value)).map(|w| (*w).to_owned()).collect())
        })
}
