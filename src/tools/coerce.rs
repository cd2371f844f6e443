//! Schema-driven argument coercion: models often send `"42"` for 42,
//! `"true"` for true or a JSON array inside a string. Before dispatch each
//! argument is fitted to its schema where that is unambiguous; a value that
//! already fits, or cannot be fitted, is left as it is (the tool then
//! reports the mismatch).

use serde_json::{Map, Number, Value};

/// Fits `value` to `schema` (a JSON Schema), recursively through object
/// properties and array items.
pub fn coerce(value: Value, schema: &Value) -> Value {
    if let Some(options) = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array)
    {
        if let Some(fitting) = options.iter().find(|s| fits_declared(&value, s)) {
            return descend(value, fitting);
        }
        for option in options {
            let candidate = coerce(value.clone(), option);
            if fits_declared(&candidate, option) {
                return candidate;
            }
        }
        return value;
    }
    let types = declared_types(schema);
    if types.is_empty() || types.iter().any(|t| fits(&value, t)) {
        return descend(value, schema);
    }
    for ty in &types {
        if let Some(converted) = convert(&value, ty) {
            return descend(converted, schema);
        }
    }
    value
}

/// The `type` of a schema as a list (`"integer"` or `["integer","null"]`),
/// with `nullable: true` adding `null`.
fn declared_types(schema: &Value) -> Vec<&str> {
    let mut types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if schema.get("nullable") == Some(&Value::Bool(true)) {
        types.push("null");
    }
    types
}

fn fits_declared(value: &Value, schema: &Value) -> bool {
    let types = declared_types(schema);
    !types.is_empty() && types.iter().any(|t| fits(value, t))
}

fn fits(value: &Value, ty: &str) -> bool {
    match ty {
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => false,
    }
}

fn convert(value: &Value, ty: &str) -> Option<Value> {
    match (ty, value) {
        ("integer", Value::String(s)) => {
            let text = s.trim();
            if let Ok(i) = text.parse::<i64>() {
                return Some(Value::from(i));
            }
            if let Ok(u) = text.parse::<u64>() {
                return Some(Value::from(u));
            }
            whole_number(parse_finite(text)?)
        }
        ("integer", Value::Number(n)) => whole_number(n.as_f64()?),
        ("number", Value::String(s)) => {
            let text = s.trim();
            if let Ok(i) = text.parse::<i64>() {
                return Some(Value::from(i));
            }
            Number::from_f64(parse_finite(text)?).map(Value::Number)
        }
        ("boolean", Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        ("null", Value::String(s)) if s.trim() == "null" => Some(Value::Null),
        ("array", Value::String(s)) if s.trim_start().starts_with('[') => {
            serde_json::from_str::<Value>(s)
                .ok()
                .filter(Value::is_array)
                .or_else(|| python_list(s))
        }
        ("array", scalar @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => {
            Some(Value::Array(vec![scalar.clone()]))
        }
        ("object", Value::String(s)) if s.trim_start().starts_with('{') => {
            serde_json::from_str::<Value>(s)
                .ok()
                .filter(Value::is_object)
        }
        ("string", Value::Number(n)) => Some(Value::String(n.to_string())),
        ("string", Value::Bool(b)) => Some(Value::String(b.to_string())),
        _ => None,
    }
}

/// A Python list literal as models write one in a string (`"['a', 'b']"`,
/// `"[1, True, None]"`): quoted strings either way, numbers, `True`,
/// `False`, `None`, nested lists. `None` unless the whole text is one.
fn python_list(text: &str) -> Option<Value> {
    let mut chars = text.trim().chars().peekable();
    let list = python_value(&mut chars, 0)?;
    (chars.next().is_none() && list.is_array()).then_some(list)
}

/// Nesting deeper than this is not a list a model meant (and would take
/// the stack).
const PYTHON_DEPTH: usize = 16;

fn python_value(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    depth: usize,
) -> Option<Value> {
    let skip = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
    };
    skip(chars);
    let value = match *chars.peek()? {
        '[' if depth < PYTHON_DEPTH => {
            chars.next();
            let mut items = Vec::new();
            loop {
                skip(chars);
                if chars.next_if_eq(&']').is_some() {
                    break;
                }
                items.push(python_value(chars, depth + 1)?);
                skip(chars);
                match chars.next()? {
                    ',' => {}
                    ']' => break,
                    _ => return None,
                }
            }
            Value::Array(items)
        }
        quote @ ('\'' | '"') => {
            chars.next();
            let mut s = String::new();
            loop {
                match chars.next()? {
                    '\\' => s.push(match chars.next()? {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    }),
                    c if c == quote => break,
                    c => s.push(c),
                }
            }
            Value::String(s)
        }
        _ => {
            let mut word = String::new();
            while let Some(c) = chars.next_if(|c| !matches!(c, ',' | ']') && !c.is_whitespace()) {
                word.push(c);
            }
            match word.as_str() {
                "True" => Value::Bool(true),
                "False" => Value::Bool(false),
                "None" => Value::Null,
                number => serde_json::from_str::<Number>(number)
                    .ok()
                    .map(Value::Number)?,
            }
        }
    };
    skip(chars);
    Some(value)
}

fn parse_finite(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|f| f.is_finite())
}

/// `f` as a JSON integer when it is whole and within i64.
fn whole_number(f: f64) -> Option<Value> {
    let in_range = f >= i64::MIN as f64 && f < i64::MAX as f64;
    (f.fract() == 0.0 && in_range).then(|| Value::from(f as i64))
}

/// Coerces the inside of an array or object by its `items` / `properties`.
fn descend(value: Value, schema: &Value) -> Value {
    match value {
        Value::Array(items) => match schema.get("items") {
            Some(item_schema) if item_schema.is_object() => Value::Array(
                items
                    .into_iter()
                    .map(|item| coerce(item, item_schema))
                    .collect(),
            ),
            _ => Value::Array(items),
        },
        Value::Object(fields) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties").filter(|s| s.is_object());
            let coerced: Map<String, Value> = fields
                .into_iter()
                .map(|(key, field)| {
                    let field_schema = properties.and_then(|p| p.get(&key)).or(extra);
                    let field = match field_schema {
                        Some(s) => coerce(field, s),
                        None => field,
                    };
                    (key, field)
                })
                .collect();
            Value::Object(coerced)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::coerce;

    fn one(value: serde_json::Value, schema: serde_json::Value) -> serde_json::Value {
        coerce(value, &schema)
    }

    #[test]
    fn strings_become_numbers_only_when_exact() {
        let int = json!({"type": "integer"});
        assert_eq!(one(json!("42"), int.clone()), json!(42));
        assert_eq!(one(json!(" -7 "), int.clone()), json!(-7));
        assert_eq!(one(json!("42.0"), int.clone()), json!(42));
        assert_eq!(one(json!(42.0), int.clone()), json!(42));
        assert_eq!(one(json!("42.5"), int.clone()), json!("42.5"));
        assert_eq!(one(json!("inf"), int.clone()), json!("inf"));
        assert_eq!(one(json!("NaN"), json!({"type": "number"})), json!("NaN"));
        assert_eq!(
            one(json!("1e400"), json!({"type": "number"})),
            json!("1e400")
        );
        assert_eq!(one(json!("2.5"), json!({"type": "number"})), json!(2.5));
        assert_eq!(one(json!("ten"), int), json!("ten"));
    }

    #[test]
    fn booleans_nulls_arrays_objects() {
        assert_eq!(one(json!("true"), json!({"type": "boolean"})), json!(true));
        assert_eq!(
            one(json!("FALSE"), json!({"type": "boolean"})),
            json!(false)
        );
        assert_eq!(one(json!("yes"), json!({"type": "boolean"})), json!("yes"));
        assert_eq!(
            one(json!("null"), json!({"type": ["string", "null"]})),
            json!("null")
        );
        assert_eq!(
            one(json!("null"), json!({"type": ["integer", "null"]})),
            json!(null)
        );
        assert_eq!(
            one(json!("null"), json!({"type": "integer"})),
            json!("null")
        );
        assert_eq!(
            one(
                json!("[1, 2]"),
                json!({"type": "array", "items": {"type": "integer"}})
            ),
            json!([1, 2])
        );
        assert_eq!(
            one(
                json!("a.txt"),
                json!({"type": "array", "items": {"type": "string"}})
            ),
            json!(["a.txt"])
        );
        let strings = json!({"type": "array", "items": {"type": "string"}});
        assert_eq!(
            one(json!("['a.txt', \"b's.md\"]"), strings.clone()),
            json!(["a.txt", "b's.md"])
        );
        assert_eq!(
            one(json!("[1, True, None, ['x']]"), json!({"type": "array"})),
            json!([1, true, null, ["x"]])
        );
        assert_eq!(
            one(json!("['a', oops"), strings.clone()),
            json!("['a', oops")
        );
        assert_eq!(one(json!("['a'] tail"), strings), json!("['a'] tail"));
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(
            one(json!(deep.clone()), json!({"type": "array"})),
            json!(deep)
        );
        assert_eq!(
            one(
                json!("5"),
                json!({"type": "array", "items": {"type": "integer"}})
            ),
            json!([5])
        );
        assert_eq!(
            one(json!("{\"a\":1}"), json!({"type": "object"})),
            json!({"a": 1})
        );
        assert_eq!(
            one(json!("{broken"), json!({"type": "object"})),
            json!("{broken")
        );
    }

    #[test]
    fn unions_keep_valid_values_and_try_types_in_order() {
        let union = json!({"type": ["integer", "boolean"]});
        assert_eq!(one(json!("3"), union.clone()), json!(3));
        assert_eq!(one(json!("true"), union.clone()), json!(true));
        assert_eq!(one(json!(true), union), json!(true));
        let any_of = json!({"anyOf": [{"type": "integer"}, {"type": "string"}]});
        assert_eq!(
            one(json!("3"), any_of.clone()),
            json!("3"),
            "already a valid string"
        );
        let any_of = json!({"anyOf": [{"type": "boolean"}, {"type": "integer"}]});
        assert_eq!(one(json!("3"), any_of), json!(3));
    }

    #[test]
    fn nested_properties_are_coerced() {
        let schema = json!({
            "type": "object",
            "properties": {
                "offset": {"type": "integer"},
                "paths": {"type": "array", "items": {"type": "string"}},
                "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}}
            }
        });
        let args = json!({"offset": "10", "paths": "x", "opts": {"deep": "true"}, "other": "1"});
        assert_eq!(
            coerce(args, &schema),
            json!({"offset": 10, "paths": ["x"], "opts": {"deep": true}, "other": "1"})
        );
    }

    fn arb_json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(json!(null)),
            any::<bool>().prop_map(|b| json!(b)),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            ".{0,12}".prop_map(|s| json!(s)),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                prop::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_schema() -> impl Strategy<Value = serde_json::Value> {
        let ty = prop_oneof![
            Just("string"),
            Just("integer"),
            Just("number"),
            Just("boolean"),
            Just("array"),
            Just("object"),
            Just("null")
        ];
        prop_oneof![
            ty.clone().prop_map(|t| json!({"type": t})),
            (ty.clone(), ty).prop_map(|(a, b)| json!({"type": [a, b]})),
        ]
    }

    proptest! {
        #[test]
        fn integers_round_trip_through_strings(n in any::<i64>()) {
            prop_assert_eq!(one(json!(n.to_string()), json!({"type": "integer"})), json!(n));
        }

        #[test]
        fn fractions_never_become_integers(f in any::<f64>().prop_filter("fractional", |f| f.is_finite() && f.fract() != 0.0)) {
            let text = f.to_string();
            prop_assert_eq!(one(json!(text.clone()), json!({"type": "integer"})), json!(text));
        }

        #[test]
        fn valid_values_are_untouched(n in any::<i64>(), s in ".{0,20}", b in any::<bool>()) {
            prop_assert_eq!(one(json!(n), json!({"type": "integer"})), json!(n));
            prop_assert_eq!(one(json!(s.clone()), json!({"type": "string"})), json!(s));
            prop_assert_eq!(one(json!(b), json!({"type": "boolean"})), json!(b));
        }

        #[test]
        fn coercion_never_panics_and_is_idempotent(value in arb_json(), schema in arb_schema()) {
            let once = coerce(value, &schema);
            let twice = coerce(once.clone(), &schema);
            prop_assert_eq!(once, twice);
        }

        #[test]
        fn booleans_parse_in_any_case(b in any::<bool>(), upper in any::<bool>()) {
            let text = if upper { b.to_string().to_uppercase() } else { b.to_string() };
            prop_assert_eq!(one(json!(text), json!({"type": "boolean"})), json!(b));
        }
    }
}
