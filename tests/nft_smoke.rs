mod nft_common;
use nft_common::Netns;
use nodeportd::nft::{self, synthetic, NftSocket};

#[test]
fn smoke_full_sync_lists() {
    let Some(ns) = Netns::new() else { return };
    let r = ns.run(|| async {
        let mut s = NftSocket::new().unwrap();
        let rs = synthetic::ruleset(2, 3);
        let rep = nft::full_sync(&mut s, &rs).await;
        format!("{rep:?}")
    });
    eprintln!("{r}");
    eprintln!("{}", ns.nft(&["list", "ruleset"]));
}
