//! JSON written canonically: object keys in the order of their UTF-8 bytes at every level,
//! no blank space, strings and numbers as serde_json writes them. One text per value,
//! whatever order its keys were built or received in: what a digest is taken of.

use serde_json::Value;

/// `value` as canonical JSON text.
pub fn canonical(value: &Value) -> String {
    let mut out = Vec::with_capacity(256);
    write_canonical(value, &mut out);
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// `value` as canonical JSON, appended to `out` (one buffer for many values).
pub fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                serde_json::to_writer(&mut *out, k).expect("a string serialises");
                out.push(b':');
                write_canonical(&map[k], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => serde_json::to_writer(&mut *out, scalar).expect("a value serialises"),
    }
}
