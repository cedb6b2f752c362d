//! The HA storm's floor (bench/storm/etcd-floor.sh): `K` transactions of a
//! token spend's shape (the key absent, then written empty), one at a time
//! on one connection, as an appliance's spends reach etcd during a storm.
//!
//! Usage: txn-floor ENDPOINTS K   (ENDPOINTS: comma-separated URLs)

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: txn-floor ENDPOINTS K";
    let endpoints: Vec<String> = args
        .next()
        .ok_or(usage)?
        .split(',')
        .map(String::from)
        .collect();
    let k: u64 = args.next().ok_or(usage)?.parse()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut c = Client::connect(endpoints, None).await?;
        let t0 = std::time::Instant::now();
        for i in 0..k {
            let key = format!("/floor/spent/{:020}/{i:016x}", 2_000_000_000u64);
            let t = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key, Vec::new(), None)]);
            if !c.txn(t).await?.succeeded() {
                return Err("a fresh key was already there: not an empty etcd".into());
            }
        }
        println!("{k} txns in {:.3} s", t0.elapsed().as_secs_f64());
        Ok(())
    })
}
