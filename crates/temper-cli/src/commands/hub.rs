//! `temper hub serve` and `temper hub user add`.

use anyhow::{Context, bail};
use temper_hub::Limits;
use temper_hub::db::{Db, Scope};
use temper_hub::server::{Hub, HubConfig};

use crate::args::{HubCommand, HubDataArgs, HubServeArgs, HubUserAddArgs, HubUserCommand};

pub async fn run(command: HubCommand) -> anyhow::Result<()> {
    match command {
        HubCommand::Serve(args) => serve(args).await,
        HubCommand::User(HubUserCommand::Add(args)) => user_add(args).await,
        HubCommand::Bench(args) => temper_bench::hub::run(args).await,
    }
}

async fn open_db(data: &HubDataArgs) -> anyhow::Result<Db> {
    let db = match &data.database {
        Some(url) => Db::open(url).await,
        None => Db::open_dir(&data.dir()).await,
    };
    db.with_context(|| format!("cannot open the hub database of {}", data.dir().display()))
}

async fn serve(args: HubServeArgs) -> anyhow::Result<()> {
    let mut cfg = HubConfig::new(args.data.dir());
    cfg.database = args.data.database.clone();
    cfg.storage = args.storage.clone();
    cfg.public_url = args.public_url.clone();
    cfg.rate_per_s = args.rate;
    cfg.burst = args.burst;
    cfg.limits = Limits { max_archive_bytes: args.max_archive_mb << 20, ..Limits::default() };
    let hub = Hub::open(cfg).await.context("cannot open the hub")?;
    let listener = tokio::net::TcpListener::bind(&args.addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.addr))?;
    let addr = listener.local_addr()?;
    // The first line on stdout says where it listens (tests and scripts read it).
    println!("temper hub listening on http://{addr} (data {})", args.data.dir().display());
    let shutdown = async {
        super::interrupted().await;
        eprintln!("temper hub: shutting down");
    };
    temper_hub::server::serve(hub, listener, shutdown).await.context("the hub server failed")
}

async fn user_add(args: HubUserAddArgs) -> anyhow::Result<()> {
    // A token made in a folder no hub serves is one the running hub rejects: without --data,
    // the default folder must be a hub's already (with --data, a hub may be set up before its
    // first start).
    let file = args.data.dir().join("hub.db");
    if args.data.data.is_none() && args.data.database.is_none() && !file.is_file() {
        bail!(
            "{} does not exist: pass --data DIR, the folder your `temper hub serve --data DIR` \
             uses (default ./hub-data, made when the hub first starts), or --database URL",
            file.display()
        );
    }
    let db = open_db(&args.data).await?;
    let scopes: Vec<Scope> =
        args.scopes.iter().map(|s| Scope::parse(s)).collect::<Result<_, _>>()?;
    if db.user_exists(&args.name).await? {
        eprintln!("user `{}` exists; adding a token", args.name);
    } else {
        db.add_user(&args.name).await?;
        eprintln!("created user `{}`", args.name);
    }
    let (id, secret) = db.create_token(&args.name, &scopes, &args.label).await?;
    eprintln!(
        "token {id} ({}); it is shown once: keep it (TEMPER_HUB_TOKEN or `temper login`)",
        args.scopes.join(",")
    );
    println!("{secret}");
    Ok(())
}
