//! SQL-language functions (`CREATE FUNCTION f(a int) RETURNS int LANGUAGE
//! SQL AS $$SELECT a + 1$$`), as the catalog keeps them: the body is one
//! expression over the parameters, inlined wherever the function is called
//! (see `sql::sql_function`).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FunctionDef {
    pub name: String,
    /// Each parameter's name, if it has one, and its SQL type as written.
    pub params: Vec<(Option<String>, String)>,
    /// The result's SQL type as written.
    pub returns: String,
    /// The body's one expression, as SQL.
    pub body: String,
    /// The CREATE statement as written.
    pub definition: String,
    pub owner: String,
}
