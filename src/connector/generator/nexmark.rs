//! The `nexmark` generator: the Nexmark benchmark's events through the `nexmark` crate.

use super::*;

/// Options of `connector = 'nexmark'`.
///
/// `nexmark.event.num` counts the events of the whole Nexmark stream,
/// people, auctions and bids together, as RisingWave counts them, not
/// rows of the chosen type. In the standard mix of 1 person, 3 auctions and
/// 46 bids in every 50 events, `nexmark.event.num = '1000'` gives 920 bids,
/// 60 auctions or 20 people. Counting this way cuts the Bid, Auction and
/// Person sources of one configuration at the same point of one stream, so
/// the queries that join them (3, 8) find each bid's auction and each
/// auction's seller.
pub(super) struct NexmarkOptions {
    pub(super) kind: EventType,
    /// Events of the whole stream to generate; `None` for no end.
    pub(super) events: Option<u64>,
    /// Events of the whole stream a second; `None` for as fast as possible.
    pub(super) rate: Option<u64>,
    pub(super) splits: u64,
    /// Event time of the first event, in milliseconds since the Unix epoch.
    pub(super) base_time: u64,
    /// The generated columns the table keeps, in table order.
    pub(super) columns: Vec<&'static str>,
}

impl NexmarkOptions {
    pub(super) fn parse(connector: &ConnectorDef, table: &TableDef) -> Result<NexmarkOptions> {
        refuse_unknown(connector, NEXMARK_OPTIONS, None)?;
        let kind = event_type(connector)?;
        let splits = number(connector, "nexmark.split.num")?.unwrap_or(1);
        if !(1..=MAX_SPLITS).contains(&splits) {
            return Err(Error::InvalidParameter(format!(
                "nexmark.split.num must be between 1 and {MAX_SPLITS}, not {splits}"
            )));
        }
        Ok(NexmarkOptions {
            kind,
            events: number(connector, "nexmark.event.num")?,
            rate: number(connector, "nexmark.event.rate")?.filter(|r| *r > 0),
            splits,
            base_time: number(connector, "nexmark.base.time")?.unwrap_or(BASE_TIME),
            columns: nexmark_columns(kind, table)?,
        })
    }

    /// Event times follow the rate, so that under a rate they advance like
    /// the clock; unthrottled, they keep the crate's 10 000 events a second.
    pub(super) fn config(&self) -> NexmarkConfig {
        let mut config = NexmarkConfig {
            base_time: self.base_time,
            ..NexmarkConfig::default()
        };
        if let Some(rate) = self.rate {
            let rate = usize::try_from(rate).unwrap_or(usize::MAX);
            config.first_rate = rate;
            config.next_rate = rate;
        }
        config
    }

    /// The part of all events that are of this source's type.
    pub(super) fn share(&self) -> f64 {
        let c = NexmarkConfig::default();
        let part = match self.kind {
            EventType::Person => c.person_proportion,
            EventType::Auction => c.auction_proportion,
            EventType::Bid => c.bid_proportion,
        };
        let whole = c.person_proportion + c.auction_proportion + c.bid_proportion;
        part as f64 / whole as f64
    }

    /// Split `split` of `splits` takes every `splits`-th event of the type,
    /// starting at its own index or where it committed.
    pub(super) fn split(&self, split: u64, committed: Option<u64>) -> NexmarkSplit {
        let generator = EventGenerator::new(self.config())
            .with_offset(committed.unwrap_or(split))
            .with_step(self.splits)
            .with_type_filter(self.kind);
        NexmarkSplit {
            generator,
            kind: self.kind,
            end: self.events,
            columns: self.columns.clone(),
        }
    }
}

pub(super) fn event_type(connector: &ConnectorDef) -> Result<EventType> {
    let Some(text) = connector.option("nexmark.table.type") else {
        return Err(Error::InvalidParameter(
            "connector 'nexmark' needs nexmark.table.type = 'Bid', 'Auction' or 'Person'".into(),
        ));
    };
    match text.trim().to_lowercase().as_str() {
        "bid" => Ok(EventType::Bid),
        "auction" => Ok(EventType::Auction),
        "person" => Ok(EventType::Person),
        _ => Err(Error::InvalidParameter(format!(
            "nexmark.table.type must be 'Bid', 'Auction' or 'Person', not '{text}'"
        ))),
    }
}

pub(super) fn type_name(kind: EventType) -> &'static str {
    match kind {
        EventType::Bid => "Bid",
        EventType::Auction => "Auction",
        EventType::Person => "Person",
    }
}

/// The columns of each event type, named and typed as RisingWave's Nexmark
/// source (and the Nexmark paper) name them.
pub(super) fn generated(kind: EventType) -> &'static [(&'static str, Type)] {
    use Type::{Bigint, Timestamp, Varchar};
    match kind {
        EventType::Bid => &[
            ("auction", Bigint),
            ("bidder", Bigint),
            ("price", Bigint),
            ("channel", Varchar),
            ("url", Varchar),
            ("date_time", Timestamp),
            ("extra", Varchar),
        ],
        EventType::Auction => &[
            ("id", Bigint),
            ("item_name", Varchar),
            ("description", Varchar),
            ("initial_bid", Bigint),
            ("reserve", Bigint),
            ("date_time", Timestamp),
            ("expires", Timestamp),
            ("seller", Bigint),
            ("category", Bigint),
            ("extra", Varchar),
        ],
        EventType::Person => &[
            ("id", Bigint),
            ("name", Varchar),
            ("email_address", Varchar),
            ("credit_card", Varchar),
            ("city", Varchar),
            ("state", Varchar),
            ("date_time", Timestamp),
            ("extra", Varchar),
        ],
    }
}

/// The table's columns as generated ones: each must be one by name and type.
pub(super) fn nexmark_columns(kind: EventType, table: &TableDef) -> Result<Vec<&'static str>> {
    let all = generated(kind);
    let names: Vec<&str> = all.iter().map(|(name, _)| *name).collect();
    let mut out = Vec::with_capacity(table.columns.len());
    for column in &table.columns {
        let Some((name, ty)) = all.iter().find(|(name, _)| *name == column.name) else {
            return Err(Error::UndefinedColumn(format!(
                "column \"{}\" is not in Nexmark {} events; they have {}",
                column.name,
                type_name(kind),
                names.join(", ")
            )));
        };
        if Type::of(&column.data_type) != Some(*ty) {
            return Err(Error::DatatypeMismatch(format!(
                "column \"{name}\" of Nexmark {} events is {}, not {}",
                type_name(kind),
                ty.sql(),
                column.sql_type
            )));
        }
        out.push(*name);
    }
    Ok(out)
}

/// One Nexmark split: its generator and where the stream ends.
pub(super) struct NexmarkSplit {
    pub(super) generator: EventGenerator,
    pub(super) kind: EventType,
    pub(super) end: Option<u64>,
    pub(super) columns: Vec<&'static str>,
}

impl NexmarkSplit {
    pub(super) fn next_batch(&mut self, max: usize, schema: &SchemaRef) -> Result<RecordBatch> {
        let events = self.next_events(max);
        let mut arrays = Vec::with_capacity(self.columns.len());
        for (name, field) in self.columns.iter().zip(schema.fields()) {
            let array = events.column(name).ok_or_else(|| {
                Error::Internal(format!("Nexmark has no column {name}; this is a bug"))
            })?;
            arrays.push(fit(array, field)?);
        }
        Ok(RecordBatch::try_new(schema.clone(), arrays)?)
    }

    /// Up to `max` events, stopping where the whole stream ends.
    pub(super) fn next_events(&mut self, max: usize) -> Events {
        let mut events = Events::new(self.kind);
        while events.len() < max
            && self
                .end
                .is_none_or(|end| self.generator.global_offset() < end)
        {
            let Some(event) = self.generator.next() else {
                break;
            };
            events.push(event);
        }
        events
    }
}

/// A batch of events of one type.
pub(super) enum Events {
    Bids(Vec<Bid>),
    Auctions(Vec<Auction>),
    People(Vec<Person>),
}

impl Events {
    pub(super) fn new(kind: EventType) -> Events {
        match kind {
            EventType::Bid => Events::Bids(Vec::new()),
            EventType::Auction => Events::Auctions(Vec::new()),
            EventType::Person => Events::People(Vec::new()),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Events::Bids(v) => v.len(),
            Events::Auctions(v) => v.len(),
            Events::People(v) => v.len(),
        }
    }

    /// The generator's type filter makes every event the batch's type.
    pub(super) fn push(&mut self, event: Event) {
        match (self, event) {
            (Events::Bids(v), Event::Bid(e)) => v.push(e),
            (Events::Auctions(v), Event::Auction(e)) => v.push(e),
            (Events::People(v), Event::Person(e)) => v.push(e),
            _ => {}
        }
    }

    pub(super) fn column(&self, name: &str) -> Option<ArrayRef> {
        match self {
            Events::Bids(bids) => bid_column(bids, name),
            Events::Auctions(auctions) => auction_column(auctions, name),
            Events::People(people) => person_column(people, name),
        }
    }
}

pub(super) fn bid_column(bids: &[Bid], name: &str) -> Option<ArrayRef> {
    let it = bids.iter();
    Some(match name {
        "auction" => bigints(it.map(|b| b.auction)),
        "bidder" => bigints(it.map(|b| b.bidder)),
        "price" => bigints(it.map(|b| b.price)),
        "channel" => texts(it.map(|b| b.channel.as_str())),
        "url" => texts(it.map(|b| b.url.as_str())),
        "date_time" => times(it.map(|b| b.date_time)),
        "extra" => texts(it.map(|b| b.extra.as_str())),
        _ => return None,
    })
}

pub(super) fn auction_column(auctions: &[Auction], name: &str) -> Option<ArrayRef> {
    let it = auctions.iter();
    Some(match name {
        "id" => bigints(it.map(|a| a.id)),
        "item_name" => texts(it.map(|a| a.item_name.as_str())),
        "description" => texts(it.map(|a| a.description.as_str())),
        "initial_bid" => bigints(it.map(|a| a.initial_bid)),
        "reserve" => bigints(it.map(|a| a.reserve)),
        "date_time" => times(it.map(|a| a.date_time)),
        "expires" => times(it.map(|a| a.expires)),
        "seller" => bigints(it.map(|a| a.seller)),
        "category" => bigints(it.map(|a| a.category)),
        "extra" => texts(it.map(|a| a.extra.as_str())),
        _ => return None,
    })
}

pub(super) fn person_column(people: &[Person], name: &str) -> Option<ArrayRef> {
    let it = people.iter();
    Some(match name {
        "id" => bigints(it.map(|p| p.id)),
        "name" => texts(it.map(|p| p.name.as_str())),
        "email_address" => texts(it.map(|p| p.email_address.as_str())),
        "credit_card" => texts(it.map(|p| p.credit_card.as_str())),
        "city" => texts(it.map(|p| p.city.as_str())),
        "state" => texts(it.map(|p| p.state.as_str())),
        "date_time" => times(it.map(|p| p.date_time)),
        "extra" => texts(it.map(|p| p.extra.as_str())),
        _ => return None,
    })
}

pub(super) fn bigints(values: impl Iterator<Item = usize>) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(
        values.map(|v| i64::try_from(v).unwrap_or(i64::MAX)),
    ))
}

pub(super) fn texts<'a>(values: impl Iterator<Item = &'a str>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(values))
}

/// Nexmark's millisecond event times as microsecond timestamps.
pub(super) fn times(millis: impl Iterator<Item = u64>) -> ArrayRef {
    Arc::new(TimestampMicrosecondArray::from_iter_values(millis.map(
        |ms| i64::try_from(ms).unwrap_or(i64::MAX).saturating_mul(1000),
    )))
}
