//! What `ALTER ... RENAME TO` changes in the text weir keeps: views keep
//! their queries as SQL, planned again at every start, so a query that
//! reads a renamed relation is rewritten to read it under its new name.
//! A read without an alias keeps the old name as its alias, so that
//! `t.a` in the rest of the query still means what it meant.

use std::ops::ControlFlow;

use sqlparser::ast::{
    self, Expr, FunctionArg, FunctionArgExpr, Ident, ObjectName, TableAlias, TableFactor, Value,
    VisitMut, VisitorMut,
};
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::catalog::{ObjectKind, ViewDef};
use crate::error::{Error, Result};
use crate::sql::parser::{self, CreateView, EmitClause, Statement, ident_name};

/// An identifier as SQL must write it to mean `name`.
pub fn quoted(name: &str) -> Ident {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !is_keyword(name);
    if plain {
        Ident::new(name)
    } else {
        Ident::with_quote('"', name)
    }
}

/// Whether a plain word would not read back as the name of a relation.
fn is_keyword(name: &str) -> bool {
    let sql = format!("SELECT * FROM {name} AS x");
    match parser::parse_query(&sql) {
        Ok(query) => !query.to_string().contains(&format!("FROM {name} AS x")),
        Err(_) => true,
    }
}

struct Renamer<'a> {
    from: &'a str,
    to: &'a str,
    changed: bool,
}

impl Renamer<'_> {
    fn names_old(&self, name: &ObjectName) -> bool {
        parser::object_name(name).is_ok_and(|n| n == self.from)
    }

    /// A table function's argument that names the relation (`TUMBLE(t, ...)`,
    /// `lookup('t')`).
    fn rename_argument(&mut self, arg: &mut FunctionArg) {
        let FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) = arg else {
            return;
        };
        match expr {
            Expr::Identifier(ident) if ident_name(ident) == self.from => {
                *ident = quoted(self.to);
                self.changed = true;
            }
            Expr::Value(v) => {
                if let Value::SingleQuotedString(s) = &mut v.value
                    && *s == self.from
                {
                    *s = self.to.to_string();
                    self.changed = true;
                }
            }
            _ => {}
        }
    }
}

impl VisitorMut for Renamer<'_> {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table {
            name, alias, args, ..
        } = factor
        else {
            return ControlFlow::Continue(());
        };
        if let Some(args) = args {
            for arg in &mut args.args {
                self.rename_argument(arg);
            }
            return ControlFlow::Continue(());
        }
        if !self.names_old(name) {
            return ControlFlow::Continue(());
        }
        *name = ObjectName::from(vec![quoted(self.to)]);
        if alias.is_none() {
            *alias = Some(TableAlias {
                explicit: true,
                name: quoted(self.from),
                columns: Vec::new(),
                at: None,
            });
        }
        self.changed = true;
        ControlFlow::Continue(())
    }
}

/// `query` reading `to` where it read `from`; whether anything changed.
pub fn rename_in_query(query: &mut ast::Query, from: &str, to: &str) -> bool {
    let mut renamer = Renamer {
        from,
        to,
        changed: false,
    };
    let _ = query.visit(&mut renamer);
    renamer.changed
}

/// A stored query's text reading `to` where it read `from`, if it read it.
pub fn rename_in_text(text: &str, from: &str, to: &str) -> Result<Option<String>> {
    let mut query = parser::parse_query(text)?;
    Ok(rename_in_query(&mut query, from, to).then(|| query.to_string()))
}

/// A `CREATE [MATERIALIZED] VIEW` statement's text reading `to` where it
/// read `from`, if it read it, printed again from its parts.
pub fn rename_in_view_definition(text: &str, from: &str, to: &str) -> Result<Option<String>> {
    let (mut create, materialized) = match parser::parse(text)?.pop() {
        Some(Statement::CreateView(create)) => (create, true),
        Some(Statement::CreateLogicalView(create)) => (create, false),
        _ => return Ok(None),
    };
    if !rename_in_query(&mut create.query, from, to) {
        return Ok(None);
    }
    Ok(Some(print_view(&create, materialized)))
}

fn print_view(create: &CreateView, materialized: bool) -> String {
    let mut out = format!(
        "CREATE {}VIEW {}",
        if materialized { "MATERIALIZED " } else { "" },
        quoted(&create.name)
    );
    if !create.columns.is_empty() {
        let columns: Vec<String> = create.columns.iter().map(Ident::to_string).collect();
        out.push_str(&format!(" ({})", columns.join(", ")));
    }
    if !create.options.is_empty() {
        let options: Vec<String> = create
            .options
            .iter()
            .map(|(k, v)| format!("{k} = '{}'", v.replace('\'', "''")))
            .collect();
        out.push_str(&format!(" WITH ({})", options.join(", ")));
    }
    out.push_str(&format!(" AS {}", create.query));
    match &create.emit {
        EmitClause::Changes => {}
        EmitClause::OnWindowClose => out.push_str(" EMIT ON WINDOW CLOSE"),
        EmitClause::Every(every) => out.push_str(&format!(" EMIT EVERY {every}")),
    }
    out
}

/// A CREATE statement's text with the name it creates replaced by `to`:
/// the first name after the statement's leading keywords.
pub fn rename_created(text: &str, to: &str) -> Result<String> {
    replace_name_after(text, to, |word| {
        !matches!(
            word.as_str(),
            "CREATE"
                | "OR"
                | "REPLACE"
                | "MATERIALIZED"
                | "VIEW"
                | "TABLE"
                | "STREAM"
                | "SOURCE"
                | "SINK"
                | "INDEX"
                | "UNIQUE"
                | "CONCURRENTLY"
                | "IF"
                | "NOT"
                | "EXISTS"
                | "TEMP"
                | "TEMPORARY"
                | "APPEND"
                | "ONLY"
        )
    })
}

/// `CREATE INDEX ... ON t ...` with `t` replaced by `to`.
pub fn rename_indexed(text: &str, to: &str) -> Result<String> {
    let mut after_on = false;
    replace_name_after(text, to, |word| {
        let found = after_on && word != "ONLY";
        after_on |= word == "ON";
        found
    })
}

/// `text` with the first name for which `is_name` holds (given each word
/// upper-cased, in order) replaced by `to`; in `schema.name`, the last part.
fn replace_name_after(
    text: &str,
    to: &str,
    mut is_name: impl FnMut(String) -> bool,
) -> Result<String> {
    let mut tokens = Tokenizer::new(&sqlparser::dialect::PostgreSqlDialect {}, text)
        .tokenize()
        .map_err(|e| Error::Internal(format!("a stored definition does not tokenize: {e}")))?;
    let mut at = None;
    for (i, token) in tokens.iter().enumerate() {
        if let Token::Word(w) = token
            && is_name(w.value.to_uppercase())
        {
            at = Some(i);
            break;
        }
    }
    let Some(mut at) = at else {
        return Ok(text.to_string());
    };
    while let (Some(Token::Period), Some(Token::Word(_))) = (tokens.get(at + 1), tokens.get(at + 2))
    {
        at += 2;
    }
    tokens[at] = Token::make_word(&quoted(to).to_string(), None);
    Ok(tokens.iter().map(Token::to_string).collect())
}

/// Whether `kind`, as an ALTER statement names it, fits an object of `actual` kind:
/// `ALTER TABLE` renames any relation, as in PostgreSQL.
pub fn kind_fits(said: ObjectKind, actual: ObjectKind) -> bool {
    said == actual
        || (said == ObjectKind::Table
            && matches!(
                actual,
                ObjectKind::Source
                    | ObjectKind::MaterializedView
                    | ObjectKind::View
                    | ObjectKind::Index
            ))
}

/// A view's definition after `from` became `to`, if it read `from`.
pub fn renamed_view(def: &ViewDef, from: &str, to: &str) -> Result<Option<ViewDef>> {
    let Some(query) = rename_in_text(&def.query, from, to)? else {
        return Ok(None);
    };
    let mut def = def.clone();
    def.query = query;
    def.table.definition = match &def.index {
        Some(_) => rename_indexed(&def.table.definition, to)?,
        None => rename_in_view_definition(&def.table.definition, from, to)?
            .unwrap_or(def.table.definition),
    };
    Ok(Some(def))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn renamed(sql: &str) -> Option<String> {
        rename_in_text(sql, "t", "x").expect("parses")
    }

    #[test]
    fn reads_of_the_relation_take_the_new_name_and_keep_the_old_as_alias() {
        assert_eq!(
            renamed("SELECT t.a FROM t JOIN u ON t.id = u.id").as_deref(),
            Some("SELECT t.a FROM x AS t JOIN u ON t.id = u.id")
        );
        assert_eq!(
            renamed("SELECT y.a FROM t AS y").as_deref(),
            Some("SELECT y.a FROM x AS y")
        );
        assert_eq!(
            renamed("SELECT * FROM tumble(t, ts, INTERVAL '1' SECOND)").as_deref(),
            Some("SELECT * FROM tumble(x, ts, INTERVAL '1' SECOND)")
        );
        assert_eq!(renamed("SELECT t FROM u"), None);
    }

    #[test]
    fn definitions_rename_what_they_create_or_index() {
        assert_eq!(
            rename_created("CREATE TABLE IF NOT EXISTS t (a INT)", "u").expect("tokenizes"),
            "CREATE TABLE IF NOT EXISTS u (a INT)"
        );
        assert_eq!(
            rename_created("CREATE MATERIALIZED VIEW public.t AS SELECT 1", "Big")
                .expect("tokenizes"),
            "CREATE MATERIALIZED VIEW public.\"Big\" AS SELECT 1"
        );
        assert_eq!(
            rename_indexed("CREATE INDEX i ON t (a)", "u").expect("tokenizes"),
            "CREATE INDEX i ON u (a)"
        );
    }
}
