//! CREATE MATERIALIZED VIEW and EXPLAIN CREATE MATERIALIZED VIEW.
//!
//! The query is planned and optimized by DataFusion, then translated into a
//! dataflow ([`crate::sql::plan`]). CREATE returns once the view has
//! read everything its sources held when it was created (the backfill).

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::Statement as DfStatement;
use sqlparser::ast;

use crate::catalog::{
    ColumnDef, Emit, Object, ObjectDef, OnError, Storage, Table, TableDef, View, ViewDef,
};
use crate::dataflow::graph::Dataflow;
use crate::dataflow::profile::{Measured, Profile};
use crate::error::{Error, Result};
use crate::log::writer::log_end;
use crate::session::{Engine, Output, Session};
use crate::sql::parser::{CreateView, EmitClause, ExplainFormat};
use crate::sql::plan::{Planner, ViewShape};

pub async fn create(
    engine: &Arc<Engine>,
    session: &mut Session,
    create: CreateView,
) -> Result<Output> {
    const TAG: &str = "CREATE MATERIALIZED VIEW";
    if name_taken(engine, session, &create)? {
        return Ok(Output::command(TAG));
    }
    let (retention, on_error, partitioned) = options(&create.options)?;
    let mut query = named_columns(engine, &create).await?;
    let mut plan = plan_query(engine, &query).await?;
    let mut constants = Vec::new();
    if crate::sql::constants::reads_constants(&plan) {
        constants = super::constants::lift(engine, &mut query).await?;
    }
    let made = async {
        if !constants.is_empty() {
            plan = plan_query(engine, &query).await?;
        }
        let emit = emit_policy(engine, &create.emit).await?;
        let shape = Planner::shape(&engine.catalog, &plan, emit)?;
        // A partitioned view is what reads a split source.
        let split = crate::session::partitioned::split_sources(engine, &shape.depends_on);
        let followed: Vec<u64> = shape
            .depends_on
            .iter()
            .copied()
            .filter(|id| !partitioned || !split.iter().any(|(t, _)| t.def.id == *id))
            .collect();
        crate::session::partitioned::refuse_follower(engine, &followed, "a materialized view")?;
        if partitioned {
            let keyed = shape.key.is_some();
            crate::session::partitioned::check(engine, &plan, keyed, &shape.depends_on)?;
        }
        // A view created while partitions move is built for the new ones.
        let _partitioning = crate::session::partitioned::hold_rebuilds(engine, partitioned).await;
        let table = contents(engine.catalog.allocate_id()?, &create, &plan, &shape)?;
        let _building =
            partitioned.then(|| crate::session::partitioned::Building::start(engine, table.id));
        let def = ViewDef {
            table,
            query: query.to_string(),
            depends_on: shape.depends_on,
            emit,
            retention,
            append_only: shape.append_only,
            on_error,
            index: None,
            shared_subplans: true,
            plan_revision: crate::sql::plan::PLAN_REVISION,
            partitioned,
        };
        build_view(engine, session, def).await
    };
    let made = made.await;
    if made.is_err() {
        super::constants::drop_tables(engine, &constants).await;
    }
    made.map(|()| Output::command(TAG))
}

/// Create the view and fill it; if that fails or is cancelled, it goes.
pub(super) async fn build_view(
    engine: &Arc<Engine>,
    session: &Session,
    def: ViewDef,
) -> Result<()> {
    let Object::MaterializedView(view) = engine.catalog.create(ObjectDef::MaterializedView(def))?
    else {
        return Err(Error::Internal("a created view is not a view".into()));
    };
    let mut guard = Unfinished {
        engine: engine.clone(),
        view: Some(view.clone()),
    };
    let built = async {
        start(engine, &view, true).await?;
        backfill(engine, session, &view).await
    };
    match built.await {
        Ok(()) => {
            guard.view = None;
            Ok(())
        }
        // Gone before the error reaches the client, so that a retry can take the name.
        Err(e) => {
            guard.remove().await;
            Err(e)
        }
    }
}

/// Whether the name is in use: with IF NOT EXISTS a notice, otherwise 42P07.
fn name_taken(engine: &Engine, session: &mut Session, create: &CreateView) -> Result<bool> {
    if engine.catalog.get(&create.name).is_none() {
        return Ok(false);
    }
    if !create.if_not_exists {
        return Err(Error::DuplicateTable(create.name.clone()));
    }
    session.notice(format!(
        "relation \"{}\" already exists, skipping",
        create.name
    ));
    Ok(true)
}

/// The view's query, its columns renamed as `CREATE [MATERIALIZED] VIEW
/// name (a, b, ...)` says: the first columns take the names given, the rest
/// keep theirs, as in PostgreSQL.
async fn named_columns(engine: &Arc<Engine>, create: &CreateView) -> Result<Box<ast::Query>> {
    if create.columns.is_empty() {
        return Ok(create.query.clone());
    }
    let plan = plan_query(engine, &create.query).await?;
    let fields = plan.schema().fields();
    if create.columns.len() > fields.len() {
        return Err(Error::Syntax(format!(
            "too many column names were specified: {} for a query of {} columns",
            create.columns.len(),
            fields.len()
        )));
    }
    let names: Vec<String> = fields
        .iter()
        .enumerate()
        .map(|(i, field)| match create.columns.get(i) {
            Some(given) => given.to_string(),
            None => ast::Ident::with_quote('"', pg_column_name(field.name())).to_string(),
        })
        .collect();
    let mut seen = HashSet::new();
    for given in &create.columns {
        let name = match given.quote_style {
            Some(_) => given.value.clone(),
            None => given.value.to_lowercase(),
        };
        if !seen.insert(name) {
            return Err(Error::DuplicateColumn(format!(
                "column \"{}\" specified more than once",
                given.value
            )));
        }
    }
    let sql = format!(
        "SELECT * FROM ({}) AS __weir_named({})",
        create.query,
        names.join(", ")
    );
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    match sqlparser::parser::Parser::parse_sql(&dialect, &sql)?.pop() {
        Some(ast::Statement::Query(query)) => Ok(query),
        _ => Err(Error::Internal(format!(
            "renamed view query unreadable: {sql}"
        ))),
    }
}

/// `CREATE VIEW`: the query is planned now, to check it and to learn its
/// columns and what it reads, and again wherever the view is used.
pub async fn create_logical(
    engine: &Arc<Engine>,
    session: &mut Session,
    mut create: CreateView,
) -> Result<Output> {
    const TAG: &str = "CREATE VIEW";
    if name_taken(engine, session, &create)? {
        return Ok(Output::command(TAG));
    }
    if let Some((key, _)) = create.options.first() {
        return Err(Error::InvalidParameter(format!(
            "unrecognized view option \"{key}\"; CREATE VIEW takes no options"
        )));
    }
    let state = engine.state();
    crate::sql::corresponding::rewrite(&state, &mut create.query).await?;
    create.query = named_columns(engine, &create).await?;
    let mut statement = ast::Statement::Query(create.query.clone());
    crate::sql::colnames::name_derived_columns(&mut statement);
    crate::sql::datetime::rewrite_interval_literals(&mut statement);
    let plan = state
        .statement_to_plan(DfStatement::Statement(Box::new(statement)))
        .await?;
    let mut depends_on = Vec::new();
    // The planner inlines views it reads, under an alias of their name.
    plan.apply_with_subqueries(|node| {
        let object = match node {
            LogicalPlan::TableScan(scan) => engine.catalog.get(scan.table_name.table()),
            LogicalPlan::SubqueryAlias(alias) => engine
                .catalog
                .logical_view(alias.alias.table())
                .map(crate::catalog::Object::View),
            _ => None,
        };
        if let Some(object) = object {
            depends_on.push(object.id());
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    })?;
    depends_on.sort_unstable();
    depends_on.dedup();
    let table = TableDef {
        id: engine.catalog.allocate_id()?,
        name: create.name.clone(),
        columns: columns(plan.schema().as_arrow())?,
        primary_key: Vec::new(),
        storage: Storage::Rows,
        watermark: None,
        partitions: 1,
        definition: create.text.clone(),
        watermarked: false,
        connector: None,
        retention: None,
        conflict: None,
        key_name: None,
    };
    engine
        .catalog
        .create(ObjectDef::View(crate::catalog::LogicalViewDef {
            table,
            query: create.query.to_string(),
            depends_on,
        }))?;
    Ok(Output::command(TAG))
}

/// `WITH (retention = '...', on_error = '...', partitioned = true)`: how
/// long the view's changes stay readable by `SUBSCRIBE ... AS OF`, in
/// microseconds, what it does when an expression fails on a row, and
/// whether a cluster splits its groups over the nodes.
fn options(options: &[(String, String)]) -> Result<(i64, OnError, bool)> {
    let mut text = super::subscribe::DEFAULT_RETENTION.to_string();
    let mut on_error = OnError::default();
    let mut partitioned = false;
    for (key, value) in options {
        match key.as_str() {
            "retention" => text = value.clone(),
            "on_error" => on_error = OnError::parse(value)?,
            "partitioned" => partitioned = super::subscribe::boolean(key, value)?,
            other => {
                return Err(Error::InvalidParameter(format!(
                    "unrecognized materialized view option \"{other}\"; a view takes \
                     WITH (retention = '1 hour', on_error = 'null' | 'fail', \
                     partitioned = true | false)"
                )));
            }
        }
    }
    let duration = super::subscribe::parse_duration(&text)
        .map_err(|e| Error::InvalidParameter(format!("retention: {e}")))?;
    Ok((duration.as_micros() as i64, on_error, partitioned))
}

/// Removes a view whose CREATE did not finish, also when the statement's
/// future is dropped by a cancel request.
struct Unfinished {
    engine: Arc<Engine>,
    view: Option<Arc<View>>,
}

impl Unfinished {
    async fn remove(&mut self) {
        if let Some(view) = self.view.take() {
            remove_unfinished(&self.engine, view).await;
        }
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        let Some(view) = self.view.take() else { return };
        let engine = self.engine.clone();
        self.engine
            .background
            .spawn(async move { remove_unfinished(&engine, view).await });
    }
}

async fn remove_unfinished(engine: &Arc<Engine>, view: Arc<View>) {
    let id = view.def.table.id;
    let _ = engine.runtime.drop_view(id).await;
    let constants = super::constants::of_view(engine, &view.def.depends_on);
    for constant in &constants {
        let _ = engine.runtime.forget(constant.table().def.topic()).await;
    }
    let objects: Vec<Object> = std::iter::once(Object::MaterializedView(view))
        .chain(constants)
        .collect();
    if let Err(e) = engine.catalog.drop_objects(&objects) {
        tracing::error!(view = id, cause = %e, "could not remove an unfinished view");
    }
}

/// Wait until the view holds its inputs, telling the client how far it got every few seconds.
async fn backfill(engine: &Arc<Engine>, session: &Session, view: &Arc<View>) -> Result<()> {
    let id = view.def.table.id;
    let done = engine.runtime.catch_up(id);
    tokio::pin!(done);
    let mut ticks = tokio::time::interval(std::time::Duration::from_secs(2));
    ticks.tick().await;
    loop {
        tokio::select! {
            outcome = &mut done => return outcome,
            _ = ticks.tick() => {
                let progress = engine.runtime.progress(id).unwrap_or(0.0);
                session.progress(format!(
                    "materialized view \"{}\": backfill {:.1}% done",
                    view.def.table.name,
                    progress * 100.0
                ));
            }
        }
    }
}

/// Build a view's dataflow and hand it to the runtime (at creation, when
/// `creating`, and at every start).
pub async fn start(engine: &Arc<Engine>, view: &Arc<View>, creating: bool) -> Result<()> {
    let query = crate::sql::parser::parse_query(&view.def.query)?;
    let plan = plan_query(engine, &query).await?;
    let dataflow = build(engine, view, &plan)?;
    engine.runtime.add(dataflow, creating).await?;
    let id = view.def.table.id;
    let subscribed = engine
        .catalog
        .subscriptions()
        .into_iter()
        .filter(|s| s.from == id)
        .map(|s| s.retention);
    let retention = subscribed.fold(view.def.retention, i64::max);
    let partitions = view.table.def.partitions.max(1);
    engine.runtime.retain(
        view.table.def.log_topic(),
        crate::dataflow::runtime::Retention::fold(retention, partitions),
    )
}

fn build(engine: &Arc<Engine>, view: &View, plan: &LogicalPlan) -> Result<Dataflow> {
    let restricted;
    let plan = match crate::session::partitioned::owned_for_build(engine, view)? {
        Some(owned) => {
            let by = crate::session::partitioned::split_columns(engine, view);
            restricted = crate::sql::partition::restrict(plan, &owned, &by)?;
            &restricted
        }
        None => plan,
    };
    let table = view.table.clone();
    let changelog_end = log_end(engine.store.db(), table.def.log_topic(), 0)?;
    let props = datafusion::execution::context::ExecutionProps::new();
    Planner::new(&engine.catalog, &props)
        .with_emit(view.def.emit)
        .with_on_error(view.def.on_error)
        .sharing(view.def.shared_subplans)
        .revision(view.def.plan_revision)
        .build(table, plan, changelog_end)
}

/// The view's emit policy, with `EMIT EVERY`'s interval evaluated.
async fn emit_policy(engine: &Arc<Engine>, clause: &EmitClause) -> Result<Emit> {
    Ok(match clause {
        EmitClause::Changes => Emit::Changes,
        EmitClause::OnWindowClose => Emit::OnWindowClose,
        EmitClause::Every(interval) => Emit::Every {
            micros: every_micros(engine, interval, "EMIT EVERY INTERVAL '1' SECOND").await?,
        },
    })
}

/// `EMIT EVERY`'s interval in microseconds; `example` shows a good one.
pub async fn every_micros(
    engine: &Arc<Engine>,
    interval: &ast::Expr,
    example: &str,
) -> Result<i64> {
    let value = super::query::evaluate(engine, interval).await?;
    crate::dataflow::window::interval_micros("EMIT EVERY interval", &value)
        .map_err(|e| Error::InvalidParameter(format!("{e}; for example {example}")))
}

pub async fn explain(
    engine: &Arc<Engine>,
    create: CreateView,
    format: ExplainFormat,
) -> Result<Output> {
    let plan = plan_query(engine, &create.query).await?;
    if crate::sql::constants::reads_constants(&plan) {
        return Err(Error::NotSupported(
            "EXPLAIN of a view over VALUES or a SELECT without FROM is not supported: \
             its constant rows get tables of their own only when the view is created"
                .into(),
        ));
    }
    let emit = emit_policy(engine, &create.emit).await?;
    let shape = Planner::shape(&engine.catalog, &plan, emit)?;
    let table = contents(0, &create, &plan, &shape)?;
    let props = datafusion::execution::context::ExecutionProps::new();
    let dataflow = Planner::new(&engine.catalog, &props)
        .with_emit(emit)
        .sharing(true)
        .build(Arc::new(Table::new(table)?), &plan, 0)?;
    print(&Profile::of(&dataflow), None, format)
}

/// `EXPLAIN [ANALYZE] MATERIALIZED VIEW name`: the graph the view runs, and
/// under ANALYZE each operator's rows, time and state entries since the
/// view started in this process.
pub fn explain_running(
    engine: &Arc<Engine>,
    name: &str,
    analyze: bool,
    format: ExplainFormat,
) -> Result<Output> {
    let view = match engine.catalog.get(name) {
        Some(Object::MaterializedView(view)) => view,
        Some(_) => {
            return Err(Error::WrongObjectType(format!(
                "\"{name}\" is not a materialized view"
            )));
        }
        None => return Err(Error::UndefinedTable(name.to_string())),
    };
    let id = view.def.table.id;
    let profile = engine.runtime.profile(id).ok_or_else(|| {
        Error::PrerequisiteState(format!(
            "materialized view \"{name}\" is not running (see SHOW MATERIALIZED VIEWS)"
        ))
    })?;
    let measured = analyze.then(|| {
        profile.measure(|node| {
            engine
                .store
                .state_entries(&crate::state::keys::node_prefix(id, node))
        })
    });
    print(&profile, measured.as_deref(), format)
}

fn print(
    profile: &Profile,
    measured: Option<&[Measured]>,
    format: ExplainFormat,
) -> Result<Output> {
    match format {
        ExplainFormat::Text => super::show::text_lines("QUERY PLAN", &profile.text(measured)),
        ExplainFormat::Dot => super::show::text_lines("QUERY PLAN", &profile.dot(measured)),
        ExplainFormat::Json => {
            let json = serde_json::to_string_pretty(&profile.json(measured))
                .map_err(|e| Error::Internal(format!("cannot print the plan: {e}")))?;
            super::show::text_value("QUERY PLAN", json)
        }
    }
}

/// The table that holds a view's rows.
fn contents(
    id: u64,
    create: &CreateView,
    plan: &LogicalPlan,
    shape: &ViewShape,
) -> Result<TableDef> {
    let storage = match (shape.log_only, &shape.key) {
        (true, _) => Storage::LogView,
        (false, None) => Storage::MultisetView,
        (false, Some(_)) => Storage::KeyedView,
    };
    Ok(TableDef {
        id,
        name: create.name.clone(),
        columns: columns(plan.schema().as_arrow())?,
        primary_key: shape.key.clone().unwrap_or_default(),
        storage,
        watermark: None,
        partitions: 1,
        definition: create.text.clone(),
        watermarked: shape.watermarked,
        connector: None,
        retention: None,
        conflict: None,
        key_name: None,
    })
}

pub(super) async fn plan_query(engine: &Arc<Engine>, query: &ast::Query) -> Result<LogicalPlan> {
    let mut state = engine.state();
    // A view keeps `v > (SELECT max(v) FROM t)` as a join with the
    // subquery's one row, which changes as `t` does; a query evaluates the
    // subquery once instead.
    state
        .config_mut()
        .options_mut()
        .optimizer
        .enable_physical_uncorrelated_scalar_subquery = false;
    let mut query = query.clone();
    crate::sql::corresponding::rewrite(&state, &mut query).await?;
    let mut statement = ast::Statement::Query(Box::new(query));
    crate::sql::colnames::name_derived_columns(&mut statement);
    crate::sql::datetime::rewrite_interval_literals(&mut statement);
    let plan = state
        .statement_to_plan(DfStatement::Statement(Box::new(statement)))
        .await?;
    let plan = crate::sql::window::session_keys(plan)?;
    let plan = crate::sql::temporal::mark_now(plan)?;
    crate::sql::grouping_sets::expand(state.optimize(&plan)?)
}

/// The view's columns, named as PostgreSQL names them: an unaliased
/// aggregate is named after its function, other expressions `?column?`.
pub(super) fn columns(schema: &Schema) -> Result<Vec<ColumnDef>> {
    let mut seen = HashSet::new();
    schema
        .fields()
        .iter()
        .map(|field| {
            let name = pg_column_name(field.name());
            if !seen.insert(name.clone()) {
                return Err(Error::DuplicateColumn(name));
            }
            Ok(ColumnDef {
                name,
                data_type: field.data_type().clone(),
                sql_type: crate::sql::pg_catalog::pg_type_name(field.data_type())
                    .unwrap_or_else(|| field.data_type().to_string().to_lowercase()),
                nullable: true,
            })
        })
        .collect()
}

fn pg_column_name(name: &str) -> String {
    let is_ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_');
    if is_ident(name) {
        return name.to_string();
    }
    if let Some((head, _)) = name.split_once('(')
        && is_ident(head)
    {
        return head.to_lowercase();
    }
    match name.rsplit_once('.') {
        Some((_, last)) if is_ident(last) => last.to_string(),
        _ => "?column?".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::pg_column_name;

    #[test]
    fn columns_are_named_like_postgres_names_them() {
        assert_eq!(pg_column_name("total"), "total");
        assert_eq!(pg_column_name("count(*)"), "count");
        assert_eq!(pg_column_name("sum(t.v)"), "sum");
        assert_eq!(pg_column_name("t.city"), "city");
        assert_eq!(pg_column_name("t.a + Int64(1)"), "?column?");
    }
}
