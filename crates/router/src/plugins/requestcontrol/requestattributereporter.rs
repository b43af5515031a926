//! request-attribute-reporter (`requestcontrol/requestattributereporter/
//! plugin.go`): on each response body it evaluates a CEL expression over
//! the response's `usage` and hands the value to the proxy as `ext_proc`
//! dynamic metadata. pdsim simulates no proxy, and the plugin changes
//! nothing the EPP decides, so it runs as a no-op; what it must do is load
//! exactly as the EPP loads it. Its factory (`New`) refuses anything but
//! one attribute with a name and an expression, and compiles the
//! expression and the optional condition with cel-go against
//! `usage: google.protobuf.Struct` (`env.Compile`: parse, then type-check).
//!
//! pdsim parses and type-checks a subset of CEL exactly as cel-go would
//! for that declaration: `usage` and member selection on it (a `Struct`
//! is a `map(string, dyn)`, so a field is `dyn`), `has()` on a selection,
//! int, uint, double, string, bool and null literals, the arithmetic,
//! comparison and logical operators, the conditional, and the `int`,
//! `uint`, `double`, `string` and `size` functions, each with the standard
//! overloads of the CEL specification (`langdef.md`, "List of Standard
//! Definitions"). An expression outside that subset is refused saying so,
//! never accepted unchecked.

use crate::plugins::Checks;
use std::fmt;

/// A CEL type as the checker sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Int,
    Uint,
    Double,
    String,
    Bool,
    Null,
    /// `google.protobuf.Struct`, as CEL sees it: `map(string, dyn)`.
    Map,
    Dyn,
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ty::Int => "int",
            Ty::Uint => "uint",
            Ty::Double => "double",
            Ty::String => "string",
            Ty::Bool => "bool",
            Ty::Null => "null_type",
            Ty::Map => "map(string, dyn)",
            Ty::Dyn => "dyn",
        })
    }
}

/// Why an expression does not compile, or lies outside what pdsim checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CelError {
    /// cel-go would refuse it too (a syntax or type error).
    Invalid(String),
    /// It uses CEL pdsim does not check.
    Unchecked(String),
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    Int,
    Uint,
    Double,
    Str,
    Punct(&'static str),
}

const PUNCTS: [&str; 24] = [
    "&&", "||", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%", "!", "?", ":", "(", ")",
    ".", ",", "[", "]", "{", "}",
];

fn lex(text: &str) -> Result<Vec<Token>, CelError> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'/' && bytes.get(i + 1) == Some(&b'/') {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &text[start..i];
            if matches!(bytes.get(i), Some(b'"' | b'\'')) && matches!(word, "r" | "R" | "b" | "B") {
                return Err(CelError::Unchecked(format!(
                    "{word}-prefixed string literals"
                )));
            }
            out.push(Token::Ident(word.to_string()));
        } else if c.is_ascii_digit() {
            let start = i;
            let hex = c == b'0' && matches!(bytes.get(i + 1), Some(b'x' | b'X'));
            if hex {
                i += 2;
                while i < bytes.len() && bytes[i].is_ascii_hexdigit() {
                    i += 1;
                }
            } else {
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            let mut double = false;
            if !hex
                && bytes.get(i) == Some(&b'.')
                && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)
            {
                double = true;
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if !hex && matches!(bytes.get(i), Some(b'e' | b'E')) {
                double = true;
                i += 1;
                if matches!(bytes.get(i), Some(b'+' | b'-')) {
                    i += 1;
                }
                let digits = i;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                if i == digits {
                    return Err(CelError::Invalid(format!(
                        "malformed number `{}`",
                        &text[start..i]
                    )));
                }
            }
            if !double && matches!(bytes.get(i), Some(b'u' | b'U')) {
                i += 1;
                out.push(Token::Uint);
            } else {
                out.push(if double { Token::Double } else { Token::Int });
            }
        } else if c == b'"' || c == b'\'' {
            if bytes.get(i + 1) == Some(&c) && bytes.get(i + 2) == Some(&c) {
                return Err(CelError::Unchecked("triple-quoted strings".into()));
            }
            i += 1;
            loop {
                match bytes.get(i) {
                    None | Some(b'\n') => {
                        return Err(CelError::Invalid("unterminated string literal".into()));
                    }
                    Some(b'\\') => match bytes.get(i + 1) {
                        Some(b'\\' | b'"' | b'\'' | b'n' | b't' | b'r') => i += 2,
                        _ => {
                            return Err(CelError::Unchecked(
                                "string escapes other than \\\\ \\\" \\' \\n \\t \\r".into(),
                            ));
                        }
                    },
                    Some(q) if *q == c => {
                        i += 1;
                        break;
                    }
                    Some(_) => i += 1,
                }
            }
            out.push(Token::Str);
        } else if let Some(p) = PUNCTS.iter().find(|p| text[i..].starts_with(**p)) {
            out.push(Token::Punct(p));
            i += p.len();
        } else {
            return Err(CelError::Invalid(format!(
                "unexpected character `{}`",
                text[i..].chars().next().unwrap_or(' ')
            )));
        }
    }
    Ok(out)
}

/// A parsed expression, reduced to what the checker needs.
#[derive(Clone, Debug)]
enum Expr {
    Lit(Ty),
    Ident(String),
    /// A field selection; which field does not change its type.
    Select(Box<Expr>),
    Call(String, Vec<Expr>),
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Some(Token::Punct(q)) if *q == p) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, p: &str) -> Result<(), CelError> {
        if self.eat(p) {
            Ok(())
        } else {
            Err(CelError::Invalid(format!("expected `{p}`")))
        }
    }

    /// `Expr = ConditionalOr ["?" ConditionalOr ":" Expr]`.
    fn expr(&mut self) -> Result<Expr, CelError> {
        let cond = self.binary(0)?;
        if self.eat("?") {
            let yes = self.binary(0)?;
            self.expect(":")?;
            let no = self.expr()?;
            return Ok(Expr::Call("_?_:_".into(), vec![cond, yes, no]));
        }
        Ok(cond)
    }

    /// The binary levels, loosest first: `||`, `&&`, relations, additive,
    /// multiplicative; all left-associative.
    fn binary(&mut self, level: usize) -> Result<Expr, CelError> {
        const LEVELS: [&[&str]; 5] = [
            &["||"],
            &["&&"],
            &["==", "!=", "<=", ">=", "<", ">"],
            &["+", "-"],
            &["*", "/", "%"],
        ];
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut left = self.binary(level + 1)?;
        loop {
            if level == 2 && matches!(self.peek(), Some(Token::Ident(w)) if w == "in") {
                return Err(CelError::Unchecked("the `in` operator".into()));
            }
            let Some(op) = LEVELS[level].iter().find(|op| self.eat(op)) else {
                return Ok(left);
            };
            let right = self.binary(level + 1)?;
            left = Expr::Call(format!("_{op}_"), vec![left, right]);
        }
    }

    fn unary(&mut self) -> Result<Expr, CelError> {
        if self.eat("!") {
            return Ok(Expr::Call("!_".into(), vec![self.unary()?]));
        }
        if self.eat("-") {
            return Ok(Expr::Call("-_".into(), vec![self.unary()?]));
        }
        self.member()
    }

    fn member(&mut self) -> Result<Expr, CelError> {
        let mut e = self.primary()?;
        loop {
            if self.eat(".") {
                let Some(Token::Ident(field)) = self.peek().cloned() else {
                    return Err(CelError::Invalid("expected a field name after `.`".into()));
                };
                self.at += 1;
                if self.eat("(") {
                    return Err(CelError::Unchecked(format!(
                        "receiver-style calls (`.{field}(…)`)"
                    )));
                }
                e = Expr::Select(Box::new(e));
            } else if self.eat("[") {
                return Err(CelError::Unchecked("indexing (`[…]`)".into()));
            } else {
                return Ok(e);
            }
        }
    }

    fn primary(&mut self) -> Result<Expr, CelError> {
        let Some(token) = self.peek().cloned() else {
            return Err(CelError::Invalid("unexpected end of expression".into()));
        };
        self.at += 1;
        Ok(match token {
            Token::Int => Expr::Lit(Ty::Int),
            Token::Uint => Expr::Lit(Ty::Uint),
            Token::Double => Expr::Lit(Ty::Double),
            Token::Str => Expr::Lit(Ty::String),
            Token::Ident(word) => match word.as_str() {
                "true" | "false" => Expr::Lit(Ty::Bool),
                "null" => Expr::Lit(Ty::Null),
                _ if self.eat("(") => {
                    let mut args = Vec::new();
                    if !self.eat(")") {
                        loop {
                            args.push(self.expr()?);
                            if self.eat(")") {
                                break;
                            }
                            self.expect(",")?;
                        }
                    }
                    Expr::Call(word, args)
                }
                _ => Expr::Ident(word),
            },
            Token::Punct("(") => {
                let e = self.expr()?;
                self.expect(")")?;
                e
            }
            Token::Punct("[") => return Err(CelError::Unchecked("list literals".into())),
            Token::Punct("{") => return Err(CelError::Unchecked("map literals".into())),
            Token::Punct(".") => {
                return Err(CelError::Unchecked("leading-dot identifiers".into()));
            }
            Token::Punct(p) => return Err(CelError::Invalid(format!("unexpected `{p}`"))),
        })
    }
}

/// The standard overloads of an operator or function the subset has, as
/// (parameters, result); `None` for a name outside the subset.
fn overloads(name: &str) -> Option<Vec<(Vec<Ty>, Ty)>> {
    use Ty::*;
    let same = |tys: &[Ty], result: Option<Ty>| {
        tys.iter()
            .map(|t| (vec![*t, *t], result.unwrap_or(*t)))
            .collect::<Vec<_>>()
    };
    Some(match name {
        "_+_" => same(&[Int, Uint, Double, String], None),
        "_-_" | "_*_" | "_/_" => same(&[Int, Uint, Double], None),
        "_%_" => same(&[Int, Uint], None),
        "_<_" | "_<=_" | "_>_" | "_>=_" => same(&[Int, Uint, Double, String, Bool], Some(Bool)),
        "_&&_" | "_||_" => vec![(vec![Bool, Bool], Bool)],
        "!_" => vec![(vec![Bool], Bool)],
        "-_" => vec![(vec![Int], Int), (vec![Double], Double)],
        "int" => [Int, Uint, Double, String]
            .iter()
            .map(|t| (vec![*t], Int))
            .collect(),
        "uint" => [Uint, Int, Double, String]
            .iter()
            .map(|t| (vec![*t], Uint))
            .collect(),
        "double" => [Double, Int, Uint, String]
            .iter()
            .map(|t| (vec![*t], Double))
            .collect(),
        "string" => [String, Int, Uint, Double, Bool]
            .iter()
            .map(|t| (vec![*t], String))
            .collect(),
        "size" => vec![(vec![String], Int), (vec![Map], Int)],
        _ => return None,
    })
}

fn type_of(e: &Expr) -> Result<Ty, CelError> {
    match e {
        Expr::Lit(t) => Ok(*t),
        Expr::Ident(name) if name == "usage" => Ok(Ty::Map),
        Expr::Ident(name) => Err(CelError::Invalid(format!(
            "undeclared reference to '{name}'"
        ))),
        Expr::Select(target) => match type_of(target)? {
            Ty::Map | Ty::Dyn => Ok(Ty::Dyn),
            other => Err(CelError::Invalid(format!(
                "type '{other}' does not support field selection"
            ))),
        },
        Expr::Call(name, args) if name == "has" => match args.as_slice() {
            [Expr::Select(target)] => type_of(target).and_then(|t| match t {
                Ty::Map | Ty::Dyn => Ok(Ty::Bool),
                other => Err(CelError::Invalid(format!(
                    "type '{other}' does not support field selection"
                ))),
            }),
            _ => Err(CelError::Invalid("invalid argument to has() macro".into())),
        },
        Expr::Call(name, args) if name == "_?_:_" => {
            let tys = args.iter().map(type_of).collect::<Result<Vec<_>, _>>()?;
            if !matches!(tys[0], Ty::Bool | Ty::Dyn) {
                return Err(no_overload(name, &tys));
            }
            match (tys[1], tys[2]) {
                (a, b) if a == b => Ok(a),
                (Ty::Dyn, other) | (other, Ty::Dyn) => Ok(other),
                _ => Err(no_overload(name, &tys)),
            }
        }
        Expr::Call(name, args) if name == "_==_" || name == "_!=_" => {
            let tys = args.iter().map(type_of).collect::<Result<Vec<_>, _>>()?;
            match (tys[0], tys[1]) {
                (a, b) if a == b || a == Ty::Dyn || b == Ty::Dyn => Ok(Ty::Bool),
                (a, b) if numeric(a) && numeric(b) => Err(CelError::Unchecked(
                    "equality between different numeric types".into(),
                )),
                _ => Err(no_overload(name, &tys)),
            }
        }
        Expr::Call(name, args) => {
            let Some(candidates) = overloads(name) else {
                return Err(CelError::Unchecked(format!("the function `{name}`")));
            };
            let tys = args.iter().map(type_of).collect::<Result<Vec<_>, _>>()?;
            let matching: Vec<Ty> = candidates
                .iter()
                .filter(|(params, _)| {
                    params.len() == tys.len()
                        && params
                            .iter()
                            .zip(&tys)
                            .all(|(p, t)| p == t || *t == Ty::Dyn)
                })
                .map(|(_, result)| *result)
                .collect();
            let Some(first) = matching.first() else {
                if (name.starts_with("_<") || name.starts_with("_>"))
                    && tys.iter().all(|t| numeric(*t))
                {
                    return Err(CelError::Unchecked(
                        "comparison between different numeric types".into(),
                    ));
                }
                return Err(no_overload(name, &tys));
            };
            Ok(if matching.iter().all(|r| r == first) {
                *first
            } else {
                Ty::Dyn
            })
        }
    }
}

fn numeric(t: Ty) -> bool {
    matches!(t, Ty::Int | Ty::Uint | Ty::Double)
}

fn no_overload(name: &str, tys: &[Ty]) -> CelError {
    let args: Vec<String> = tys.iter().map(Ty::to_string).collect();
    CelError::Invalid(format!(
        "found no matching overload for '{name}' applied to '({})'",
        args.join(", ")
    ))
}

/// `env.Compile(text)` for `usage: google.protobuf.Struct`.
pub(crate) fn compile(text: &str) -> Result<(), CelError> {
    let tokens = lex(text)?;
    let mut parser = Parser { tokens, at: 0 };
    let e = parser.expr()?;
    if parser.at < parser.tokens.len() {
        return Err(CelError::Invalid(format!(
            "unexpected {:?} after the expression",
            parser.tokens[parser.at]
        )));
    }
    type_of(&e).map(|_| ())
}

/// `New`'s checks of the decoded parameters, each failure reported through
/// `bad` as (key path under `parameters`, message, whether cel-go would
/// refuse it too).
pub(crate) fn check_parameters(
    parameters: &serde_yaml::Mapping,
    bad: &mut impl FnMut(&str, String, bool),
) {
    let attributes = parameters
        .get("attributes")
        .and_then(serde_yaml::Value::as_sequence)
        .map_or(&[][..], Vec::as_slice);
    if attributes.len() != 1 {
        bad(
            "attributes",
            "attributes must contain exactly one entry".into(),
            true,
        );
        return;
    }
    let attribute = &attributes[0];
    let text = |key: &str| {
        attribute
            .get(key)
            .and_then(serde_yaml::Value::as_str)
            .unwrap_or("")
    };
    let name = attribute
        .get("key")
        .and_then(|k| k.get("name"))
        .and_then(serde_yaml::Value::as_str)
        .unwrap_or("");
    if name.is_empty() {
        bad(
            "attributes[0].key.name",
            "attributeKey.name cannot be empty".into(),
            true,
        );
    }
    if text("expression").is_empty() {
        bad(
            "attributes[0].expression",
            "attributes[0].expression cannot be empty".into(),
            true,
        );
        return;
    }
    for (key, what) in [("expression", "expression"), ("condition", "condition")] {
        let source = text(key);
        if source.is_empty() {
            continue;
        }
        match compile(source) {
            Ok(()) => {}
            Err(CelError::Invalid(why)) => bad(
                &format!("attributes[0].{key}"),
                format!("failed to compile {what}: {why}"),
                true,
            ),
            Err(CelError::Unchecked(what_for)) => bad(
                &format!("attributes[0].{key}"),
                format!(
                    "pdsim checks CEL {what}s as cel-go compiles them only within a subset (`usage` and its fields, has(), literals, arithmetic, comparison, logic, the conditional, int/uint/double/string/size), and this one uses {what_for}"
                ),
                false,
            ),
        }
    }
}

/// request-attribute-reporter's parameters: `Config` decoded strictly
/// (`attributes`, each `{key: {namespace, name}, expression, condition}`,
/// strings), then `New`'s checks and the CEL compile
/// (`requestcontrol/requestattributereporter/plugin.go`).
pub(crate) fn check(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    use serde_yaml::Value;
    let shape = |c: &mut Checks<'_>, path: &str, message: String| {
        c.problem(path, "wrong-type", message);
    };
    let strict = |value: &Value, fields: &[&str]| -> Result<(), String> {
        let Some(map) = value.as_mapping() else {
            return Err(format!(
                "must be a mapping, not {}",
                crate::manifests::yaml_type(value)
            ));
        };
        for key in map.keys() {
            let key = key.as_str().unwrap_or("?");
            if !fields.contains(&key) {
                return Err(format!(
                    "`{key}` is not a field (it takes {})",
                    fields.join(", ")
                ));
            }
        }
        Ok(())
    };
    match parameters.get("attributes") {
        None | Some(Value::Null) => {}
        Some(Value::Sequence(items)) => {
            for (i, item) in items.iter().enumerate() {
                let here = format!("attributes[{i}]");
                if let Err(e) = strict(item, &["key", "expression", "condition"]) {
                    shape(c, &here, e);
                    return;
                }
                for field in ["expression", "condition"] {
                    if let Some(v) = item.get(field)
                        && !(v.is_string() || v.is_null())
                    {
                        shape(
                            c,
                            &format!("{here}.{field}"),
                            format!("{field} must be a string"),
                        );
                        return;
                    }
                }
                if let Some(key) = item.get("key").filter(|k| !k.is_null()) {
                    if let Err(e) = strict(key, &["namespace", "name"]) {
                        shape(c, &format!("{here}.key"), e);
                        return;
                    }
                    for field in ["namespace", "name"] {
                        if let Some(v) = key.get(field)
                            && !(v.is_string() || v.is_null())
                        {
                            shape(
                                c,
                                &format!("{here}.key.{field}"),
                                format!("{field} must be a string"),
                            );
                            return;
                        }
                    }
                }
            }
        }
        Some(other) => {
            shape(
                c,
                "attributes",
                format!(
                    "attributes must be a list, not {}",
                    crate::manifests::yaml_type(other)
                ),
            );
            return;
        }
    }
    check_parameters(parameters, &mut |path, message, invalid| {
        if invalid {
            c.bad(path, message);
        } else {
            c.not_simulated(path, message);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::{CelError, compile};

    #[test]
    fn the_readme_expressions_compile() {
        // `requestattributereporter/README.md` and its tests.
        for ok in [
            "usage.prompt_tokens + usage.completion_tokens",
            "has(usage.prompt_tokens) && has(usage.completion_tokens)",
            "(has(usage.prompt_tokens) ? usage.prompt_tokens : 0) + (has(usage.completion_tokens) ? usage.completion_tokens : 0)",
            "usage.completion_tokens\n",
            "// condition\nhas(usage.completion_tokens)",
            "uint(usage.total_tokens) * 2u == 0u || usage.x.y >= 1.5e3",
            "size(usage) > 0 && !(usage.a == 'x') && -usage.b < 3",
        ] {
            assert_eq!(compile(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn what_cel_go_refuses_is_refused() {
        for (bad, why) in [
            ("request.size", "undeclared reference to 'request'"),
            ("1 + 'a'", "'_+_' applied to '(int, string)'"),
            ("!1", "'!_' applied to '(int)'"),
            ("1 ? 2 : 3", "'_?_:_' applied to '(int, int, int)'"),
            ("true ? 1 : 'a'", "'_?_:_'"),
            ("has(usage)", "invalid argument to has() macro"),
            ("(1).x", "type 'int' does not support field selection"),
            ("1.5 % 2.0", "'_%_' applied to '(double, double)'"),
            ("usage.a +", "unexpected end"),
            ("usage.a usage.b", "after the expression"),
            ("'open", "unterminated"),
            ("size(1)", "'size' applied to '(int)'"),
            ("int(usage.a) * 2u", "'_*_' applied to '(int, uint)'"),
            ("1 == 'a'", "'_==_' applied to '(int, string)'"),
        ] {
            match compile(bad) {
                Err(CelError::Invalid(message)) => {
                    assert!(message.contains(why), "{bad}: {message}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn what_pdsim_does_not_check_is_refused_as_such() {
        for unchecked in [
            "usage.tags[0]",
            "'a' in usage",
            "usage.name.startsWith('x')",
            "[1, 2]",
            "{'a': 1}",
            "matches(usage.a, 'x')",
            "1 < 2.0",
            "1 == 1u",
            "r'raw'",
            "'\\x41'",
        ] {
            assert!(
                matches!(compile(unchecked), Err(CelError::Unchecked(_))),
                "{unchecked}: {:?}",
                compile(unchecked)
            );
        }
    }
}
