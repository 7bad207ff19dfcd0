//! One trace for every value of a sweep's dimension: a symbolic trace's events
//! (`python/iteragpu/predict/symbolic.py`) made concrete for one value of the traced fields.
//!
//! The worker sends each size that depends on a traced field as a JSON expression tree (`int`,
//! `{"sym": field}`, `{"op": name, "args": [...]}`, torch's sympy functions by name), the guards
//! the run took, and each field's range. [`instantiate`] checks a value against the range and
//! every guard, then evaluates each allocation's bytes and shape and each `{"$expr": id}` in the
//! phases' inputs: the events a run at that value would have sent, for the replay unchanged.
//! Arithmetic is exact (i128 with overflow checked, rationals where sympy divides): an
//! expression it cannot evaluate, a division by zero or an overflow refuses the value, which is
//! then predicted on its own. Written by hand: the trees are torch's own small vocabulary
//! (`torch/utils/_sympy/functions.py`), and no crate evaluates them with Python's semantics.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use crate::prediction::replay::TraceEvent;
use crate::schema::trace::Domain;

/// The traced fields' values: `batch`, `context`, `prompt_tokens`.
pub type Values = BTreeMap<String, u64>;

/// A value of an expression: an integer, a fraction (under `ceil`/`floor`) or a truth value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Num {
    Int(i128),
    /// numerator, denominator > 0, in lowest terms.
    Ratio(i128, i128),
    Bool(bool),
}

fn gcd(a: i128, b: i128) -> i128 {
    let (mut a, mut b) = (a.abs(), b.abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn ratio(n: i128, d: i128) -> Result<Num, String> {
    if d == 0 {
        return Err("a division by zero".into());
    }
    let g = gcd(n, d).max(1);
    let (n, d) = if d < 0 {
        (-n / g, -d / g)
    } else {
        (n / g, d / g)
    };
    Ok(if d == 1 {
        Num::Int(n)
    } else {
        Num::Ratio(n, d)
    })
}

fn parts(x: Num) -> Result<(i128, i128), String> {
    match x {
        Num::Int(n) => Ok((n, 1)),
        Num::Ratio(n, d) => Ok((n, d)),
        Num::Bool(_) => Err("a truth value where a number was expected".into()),
    }
}

fn int(x: Num) -> Result<i128, String> {
    match x {
        Num::Int(n) => Ok(n),
        other => Err(format!("{other:?} where an integer was expected")),
    }
}

fn truth(x: Num) -> Result<bool, String> {
    match x {
        Num::Bool(b) => Ok(b),
        other => Err(format!("{other:?} where a truth value was expected")),
    }
}

const OVERFLOW: &str = "an overflow";

/// Python's floor division.
fn floor_div(a: i128, b: i128) -> Result<i128, String> {
    if b == 0 {
        return Err("a division by zero".into());
    }
    let q = a.checked_div(b).ok_or(OVERFLOW)?;
    Ok(if a % b != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    })
}

fn add(x: Num, y: Num) -> Result<Num, String> {
    let ((a, b), (c, d)) = (parts(x)?, parts(y)?);
    let n = a
        .checked_mul(d)
        .zip(c.checked_mul(b))
        .and_then(|(p, q)| p.checked_add(q))
        .ok_or(OVERFLOW)?;
    ratio(n, b.checked_mul(d).ok_or(OVERFLOW)?)
}

fn mul(x: Num, y: Num) -> Result<Num, String> {
    let ((a, b), (c, d)) = (parts(x)?, parts(y)?);
    ratio(
        a.checked_mul(c).ok_or(OVERFLOW)?,
        b.checked_mul(d).ok_or(OVERFLOW)?,
    )
}

fn compare(x: Num, y: Num) -> Result<std::cmp::Ordering, String> {
    let ((a, b), (c, d)) = (parts(x)?, parts(y)?);
    Ok(a.checked_mul(d)
        .ok_or(OVERFLOW)?
        .cmp(&c.checked_mul(b).ok_or(OVERFLOW)?))
}

/// Evaluates one tree at `values`.
fn eval(tree: &Value, values: &Values) -> Result<Num, String> {
    match tree {
        Value::Bool(b) => Ok(Num::Bool(*b)),
        Value::Number(n) => n
            .as_i64()
            .map(|n| Num::Int(n.into()))
            .or_else(|| n.as_u64().map(|n| Num::Int(n.into())))
            .ok_or_else(|| format!("{n} is not an integer")),
        Value::Object(map) => {
            if let Some(field) = map.get("sym").and_then(Value::as_str) {
                return values
                    .get(field)
                    .map(|v| Num::Int((*v).into()))
                    .ok_or_else(|| format!("no value for {field}"));
            }
            let op = map.get("op").and_then(Value::as_str).unwrap_or("");
            let args: Vec<Num> = map
                .get("args")
                .and_then(Value::as_array)
                .ok_or_else(|| format!("an expression without arguments ({op})"))?
                .iter()
                .map(|a| eval(a, values))
                .collect::<Result<_, _>>()?;
            apply(op, &args)
        }
        other => Err(format!("{other} is not an expression")),
    }
}

fn apply(op: &str, a: &[Num]) -> Result<Num, String> {
    use std::cmp::Ordering::*;
    let arg = |i: usize| {
        a.get(i)
            .copied()
            .ok_or_else(|| format!("{op} lacks argument {i}"))
    };
    let ints = |i: usize| arg(i).and_then(int);
    Ok(match op {
        "add" => a.iter().try_fold(Num::Int(0), |s, x| add(s, *x))?,
        "mul" => a.iter().try_fold(Num::Int(1), |s, x| mul(s, *x))?,
        "pow" => {
            let e = u32::try_from(ints(1)?).map_err(|_| "a negative or huge power".to_string())?;
            let (n, d) = parts(arg(0)?)?;
            ratio(
                n.checked_pow(e).ok_or(OVERFLOW)?,
                d.checked_pow(e).ok_or(OVERFLOW)?,
            )?
        }
        "floordiv" => Num::Int(floor_div(ints(0)?, ints(1)?)?),
        "ceildiv" => Num::Int(-floor_div(-ints(0)?, ints(1)?)?),
        "mod" => {
            let (x, y) = (ints(0)?, ints(1)?);
            Num::Int(x - y * floor_div(x, y)?)
        }
        "modidx" => {
            let (q, m) = (floor_div(ints(0)?, ints(1)?)?, ints(2)?);
            Num::Int(q - m * floor_div(q, m)?)
        }
        "max" | "min" => {
            let mut best = arg(0)?;
            for x in &a[1..] {
                let order = compare(*x, best)?;
                if (op == "max" && order == Greater) || (op == "min" && order == Less) {
                    best = *x;
                }
            }
            best
        }
        "truediv" | "rational" => {
            let ((n, d), (m, e)) = (parts(arg(0)?)?, parts(arg(1)?)?);
            ratio(
                n.checked_mul(e).ok_or(OVERFLOW)?,
                d.checked_mul(m).ok_or(OVERFLOW)?,
            )?
        }
        "ceil" | "floor" => {
            let (n, d) = parts(arg(0)?)?;
            let q = floor_div(n, d)?;
            Num::Int(if op == "ceil" && q * d != n { q + 1 } else { q })
        }
        "eq" | "ne" | "lt" | "le" | "gt" | "ge" => {
            let order = compare(arg(0)?, arg(1)?)?;
            Num::Bool(match op {
                "eq" => order == Equal,
                "ne" => order != Equal,
                "lt" => order == Less,
                "le" => order != Greater,
                "gt" => order == Greater,
                _ => order != Less,
            })
        }
        "and" => Num::Bool(
            a.iter()
                .try_fold(true, |s, x| Ok::<_, String>(s && truth(*x)?))?,
        ),
        "or" => Num::Bool(
            a.iter()
                .try_fold(false, |s, x| Ok::<_, String>(s || truth(*x)?))?,
        ),
        "not" => Num::Bool(!truth(arg(0)?)?),
        other => {
            return Err(format!(
                "an operation iteragpu does not evaluate ({other:?})"
            ));
        }
    })
}

/// A size: a non-negative integer that fits in u64.
fn size(tree: &Value, values: &Values) -> Result<u64, String> {
    let n = int(eval(tree, values)?)?;
    u64::try_from(n).map_err(|_| format!("a size of {n}"))
}

/// `tree` as a reader writes it: `context**2 <= 262144`, `(batch + 2) // 3`.
pub fn show(tree: &Value) -> String {
    let Value::Object(map) = tree else {
        return tree.to_string();
    };
    if let Some(field) = map.get("sym").and_then(Value::as_str) {
        return field.to_string();
    }
    let op = map.get("op").and_then(Value::as_str).unwrap_or("?");
    let args: Vec<String> = map
        .get("args")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|x| match x {
                    Value::Object(m) if m.contains_key("op") => format!("({})", show(x)),
                    _ => show(x),
                })
                .collect()
        })
        .unwrap_or_default();
    let infix = |sep: &str| args.join(sep);
    match op {
        "add" => infix(" + "),
        "mul" => infix("*"),
        "pow" => infix("**"),
        "floordiv" => infix(" // "),
        "mod" => infix(" % "),
        "truediv" | "rational" => infix("/"),
        "eq" => infix(" == "),
        "ne" => infix(" != "),
        "lt" => infix(" < "),
        "le" => infix(" <= "),
        "gt" => infix(" > "),
        "ge" => infix(" >= "),
        "and" => infix(" and "),
        "or" => infix(" or "),
        "not" => format!("not {}", infix("")),
        other => format!("{other}({})", infix(", ")),
    }
}

/// Why `values` are outside what the trace holds for, or None when they are inside: a field not
/// traced or outside its range, a guard false there, or the trace pinned to its hint.
pub fn outside(domain: &Domain, values: &Values) -> Option<String> {
    if let Some(why) = domain.pinned.first() {
        return Some(format!("the trace holds for its own values only ({why})"));
    }
    for (field, value) in values {
        let Some(range) = domain.fields.get(field) else {
            return Some(format!("{field} was not traced"));
        };
        if range.lo.is_some_and(|lo| *value < lo) || range.hi.is_some_and(|hi| *value > hi) {
            return Some(format!(
                "{field} = {value} is outside the traced range {}..{}",
                range.lo.map_or("".into(), |v| v.to_string()),
                range.hi.map_or("".into(), |v| v.to_string())
            ));
        }
    }
    if domain.fields.keys().any(|f| !values.contains_key(f)) {
        return Some("a traced field has no value".into());
    }
    for guard in &domain.guards {
        match eval(guard, values).and_then(truth) {
            Ok(true) => {}
            Ok(false) => {
                return Some(format!(
                    "the traced run took a branch that depends on `{}`, false here",
                    show(guard)
                ));
            }
            Err(why) => return Some(format!("a guard could not be evaluated ({why})")),
        }
    }
    None
}

/// `events` as a run at `values` would have sent them; Err says why this trace cannot give them.
pub fn instantiate(
    events: &[TraceEvent],
    exprs: &HashMap<u64, Value>,
    domain: &Domain,
    values: &Values,
) -> Result<Vec<TraceEvent>, String> {
    if let Some(why) = outside(domain, values) {
        return Err(why);
    }
    let at = |id: u64| -> Result<u64, String> {
        let tree = exprs
            .get(&id)
            .ok_or_else(|| format!("expression {id} was never sent"))?;
        size(tree, values)
    };
    events
        .iter()
        .map(|e| {
            Ok(match e {
                TraceEvent::Alloc(a) if a.exprs.is_some() => {
                    let mut a = a.clone();
                    let ids = a.exprs.take().unwrap_or_default();
                    for (k, id) in ids.into_iter().enumerate() {
                        let Some(id) = id else { continue };
                        let value = at(id)?;
                        match k {
                            0 => a.bytes = value,
                            k => {
                                let rank = a.shape.len();
                                *a.shape.get_mut(k - 1).ok_or_else(|| {
                                    format!("an expression for dimension {k} of a {rank}-d shape")
                                })? = value
                            }
                        }
                    }
                    TraceEvent::Alloc(a)
                }
                other => with_inputs(other, |inputs| substitute_map(inputs, &at))?
                    .unwrap_or_else(|| other.clone()),
            })
        })
        .collect()
}

/// A phase's start or end with `f` of its inputs in place of them; None for any other event.
pub fn with_inputs<E>(
    e: &TraceEvent,
    f: impl FnOnce(&Map<String, Value>) -> Result<Map<String, Value>, E>,
) -> Result<Option<TraceEvent>, E> {
    Ok(match e {
        TraceEvent::PhaseStart {
            name,
            index,
            parent,
            automatic,
            inputs,
        } => Some(TraceEvent::PhaseStart {
            name: name.clone(),
            index: *index,
            parent: *parent,
            automatic: *automatic,
            inputs: f(inputs)?,
        }),
        TraceEvent::PhaseEnd {
            index,
            failed,
            inputs,
        } => Some(TraceEvent::PhaseEnd {
            index: *index,
            failed: *failed,
            inputs: f(inputs)?,
        }),
        _ => None,
    })
}

/// `{"$expr": id}` replaced by the expression's value, everywhere in `map`.
pub fn substitute_map(
    map: &Map<String, Value>,
    at: &dyn Fn(u64) -> Result<u64, String>,
) -> Result<Map<String, Value>, String> {
    map.iter()
        .map(|(k, v)| Ok((k.clone(), substitute(v, at)?)))
        .collect()
}

fn substitute(v: &Value, at: &dyn Fn(u64) -> Result<u64, String>) -> Result<Value, String> {
    Ok(match v {
        Value::Object(m) if m.len() == 1 && m.contains_key("$expr") => {
            let id = m["$expr"]
                .as_u64()
                .ok_or_else(|| format!("{v} names no expression"))?;
            Value::from(at(id)?)
        }
        Value::Object(m) => Value::Object(substitute_map(m, at)?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| substitute(i, at))
                .collect::<Result<_, _>>()?,
        ),
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(tree: Value, v: u64) -> Result<Num, String> {
        eval(&tree, &Values::from([("batch".to_string(), v)]))
    }

    fn s() -> Value {
        json!({"sym": "batch"})
    }

    #[test]
    fn python_floor_semantics_and_exact_ceilings() {
        // The research note's cases (docs/research/symbolic-trace/q11.py), checked against sympy.
        for v in 1..200u64 {
            let i = v as i128;
            let floor = |a: i128, b: i128| a.div_euclid(b);
            let cases = [
                (
                    json!({"op": "mul", "args": [32, {"op": "floordiv", "args": [{"op": "add", "args": [s(), 2]}, 3]}]}),
                    32 * floor(i + 2, 3),
                ),
                (
                    json!({"op": "add", "args": [{"op": "mul", "args": [32, {"op": "floordiv", "args": [s(), 3]}]}, {"op": "mul", "args": [32, {"op": "max", "args": [8, s()]}]}]}),
                    32 * floor(i, 3) + 32 * i.max(8),
                ),
                (
                    json!({"op": "mul", "args": [-512, {"op": "floordiv", "args": [{"op": "mul", "args": [-1, s()]}, 32]}]}),
                    -512 * floor(-i, 32),
                ),
                (
                    json!({"op": "mul", "args": [4, {"op": "ceil", "args": [{"op": "truediv", "args": [s(), 3]}]}]}),
                    4 * ((i + 2) / 3),
                ),
                (
                    json!({"op": "mod", "args": [{"op": "mul", "args": [-1, s()]}, 7]}),
                    (-i).rem_euclid(7),
                ),
                (json!({"op": "pow", "args": [s(), 2]}), i * i),
                (
                    json!({"op": "add", "args": [{"op": "mul", "args": [{"op": "rational", "args": [1, 2]}, s()]}, {"op": "mul", "args": [{"op": "rational", "args": [1, 2]}, s()]}]}),
                    i,
                ),
            ];
            for (tree, want) in cases {
                assert_eq!(at(tree.clone(), v), Ok(Num::Int(want)), "{tree} at {v}");
            }
        }
    }

    #[test]
    fn guards_read_as_written() {
        let guard =
            json!({"op": "le", "args": [{"op": "pow", "args": [{"sym": "context"}, 2]}, 262144]});
        assert_eq!(show(&guard), "(context**2) <= 262144");
        let size = json!({"op": "mul", "args": [32, {"op": "floordiv", "args": [{"op": "add", "args": [s(), 2]}, 3]}]});
        assert_eq!(show(&size), "32*((batch + 2) // 3)");
        assert_eq!(
            show(&json!({"op": "max", "args": [8, s()]})),
            "max(8, batch)"
        );
    }

    #[test]
    fn refusals_are_errors_never_guesses() {
        assert!(at(json!({"op": "floordiv", "args": [s(), 0]}), 3).is_err());
        assert!(at(json!({"op": "pow", "args": [s(), 200]}), 1 << 40).is_err());
        assert!(at(json!({"op": "sin", "args": [s()]}), 3).is_err());
        assert!(at(json!({"sym": "context"}), 3).is_err());
        let half = json!({"op": "mul", "args": [{"op": "rational", "args": [1, 2]}, s()]});
        assert!(size(&half, &Values::from([("batch".to_string(), 3)])).is_err());
    }

    fn domain(guards: Vec<Value>, pinned: Vec<String>) -> Domain {
        Domain {
            fields: BTreeMap::from([(
                "batch".to_string(),
                crate::schema::trace::FieldDomain {
                    hint: 4,
                    lo: Some(2),
                    hi: Some(64),
                },
            )]),
            guards,
            pinned,
        }
    }

    #[test]
    fn the_range_the_guards_and_a_pin_decide_which_values_it_holds_for() {
        let d = domain(
            vec![
                json!({"op": "ne", "args": [s(), 1]}),
                json!({"op": "le", "args": [s(), 16]}),
            ],
            vec![],
        );
        let v = |n: u64| Values::from([("batch".to_string(), n)]);
        assert_eq!(outside(&d, &v(8)), None);
        assert!(outside(&d, &v(1)).unwrap().contains("outside"));
        assert!(outside(&d, &v(17)).unwrap().contains("branch"));
        assert!(outside(&d, &Values::new()).unwrap().contains("no value"));
        let pinned = domain(vec![], vec!["the run made batch concrete".into()]);
        assert!(outside(&pinned, &v(8)).unwrap().contains("concrete"));
    }

    #[test]
    fn allocations_and_phase_inputs_take_the_values() {
        let alloc = crate::schema::trace::Alloc {
            id: 1,
            bytes: 1024,
            category: crate::schema::trace::Category::Input,
            module: None,
            shape: vec![4, 64],
            dtype: "float32".into(),
            tainted: false,
            file: None,
            line: None,
            managed: false,
            exprs: Some(vec![Some(1), Some(0), None]),
        };
        let mut inputs = Map::new();
        inputs.insert("requested_shape".into(), json!([{"$expr": 0}, 64]));
        let events = vec![
            TraceEvent::PhaseStart {
                name: "inputs".into(),
                index: 0,
                parent: None,
                automatic: false,
                inputs,
            },
            TraceEvent::Alloc(Box::new(alloc.clone())),
        ];
        let exprs = HashMap::from([(0, s()), (1, json!({"op": "mul", "args": [256, s()]}))]);
        let got = instantiate(
            &events,
            &exprs,
            &domain(vec![], vec![]),
            &Values::from([("batch".into(), 10)]),
        )
        .unwrap();
        let TraceEvent::PhaseStart { inputs, .. } = &got[0] else {
            panic!("{got:?}")
        };
        assert_eq!(inputs["requested_shape"], json!([10, 64]));
        let TraceEvent::Alloc(a) = &got[1] else {
            panic!("{got:?}")
        };
        assert_eq!(
            (a.bytes, a.shape.clone(), a.exprs.clone()),
            (2560, vec![10, 64], None)
        );
        let missing = HashMap::from([(0, s())]);
        assert!(
            instantiate(
                &events,
                &missing,
                &domain(vec![], vec![]),
                &Values::from([("batch".into(), 10)])
            )
            .is_err()
        );
    }
}
