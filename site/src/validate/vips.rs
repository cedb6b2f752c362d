//! Stage two for `vips`: the api and ingress addresses, and `vips.vrrp`
//! (keepalived moving them between appliances).

use super::*;

pub(super) fn vips(cx: &mut Cx, w: Option<&wire::Vips>, networks: &[Network]) -> Option<Vips> {
    let Some(w) = w else {
        cx.err(
            "vips",
            "required: api and ingress addresses (they may equal this host's)",
        );
        return None;
    };
    let mut one = |key: &str, v: &Option<String>| match v {
        Some(s) => parse_ip(cx, key, s),
        None => {
            cx.err(key, "required");
            None
        }
    };
    let api = one("vips.api", &w.api);
    let ingress = one("vips.ingress", &w.ingress);
    let (api, ingress) = (api?, ingress?);
    let vrrp = w
        .vrrp
        .as_ref()
        .map(|v| vrrp(cx, v, [api, ingress], networks));
    let vrrp = vrrp.map(|v| v.ok_or(())).transpose().ok()?; // given and wrong: said
    Some(Vips { api, ingress, vrrp })
}

/// `vips.vrrp`: the interface, router ids and advert interval; each VIP
/// must be in a site network (its prefix length is that network's).
fn vrrp(cx: &mut Cx, w: &wire::Vrrp, vips: [IpAddr; 2], networks: &[Network]) -> Option<Vrrp> {
    let k = "vips.vrrp";
    let mut ok = true;
    let interface = match w.interface.as_deref() {
        Some(i) if !i.is_empty() && i.len() <= 15 && !i.contains(['/', ' ', '\t']) => i.to_string(),
        Some(i) => {
            cx.err(
                format!("{k}.interface"),
                format!("{i:?}: not an interface name (1-15 characters, no '/' or space)"),
            );
            ok = false;
            String::new()
        }
        None => {
            cx.err(
                format!("{k}.interface"),
                "required: the interface the VIPs live on",
            );
            ok = false;
            String::new()
        }
    };
    let ids = w.router_ids.as_ref();
    let api_id = ids.and_then(|i| i.api).unwrap_or(51);
    let ingress_id = ids.and_then(|i| i.ingress).unwrap_or(52);
    for (name, id) in [("api", api_id), ("ingress", ingress_id)] {
        if id == 0 {
            cx.err(
                format!("{k}.routerIds.{name}"),
                "0: VRRP router ids are 1-255",
            );
            ok = false;
        }
    }
    if vips[0] != vips[1] && api_id == ingress_id {
        cx.err(
            format!("{k}.routerIds"),
            format!("api and ingress both {api_id}: two VIPs need two router ids"),
        );
        ok = false;
    }
    let advert_interval = super::store::whole_seconds(
        cx,
        &format!("{k}.advertInterval"),
        w.advert_interval.as_deref(),
        1,
        1..=255,
        "",
    );
    ok &= advert_interval.is_some();
    let advert_interval = advert_interval.unwrap_or_default();
    let mut prefix = [0u8; 2];
    for (i, (name, ip)) in [("api", vips[0]), ("ingress", vips[1])]
        .into_iter()
        .enumerate()
    {
        match networks.iter().find(|n| n.subnet.contains(&ip)) {
            Some(n) => prefix[i] = n.subnet.prefix_len(),
            None => {
                cx.err(
                    format!("vips.{name}"),
                    format!("{ip} is in no site network: keepalived needs its prefix length"),
                );
                ok = false;
            }
        }
    }
    ok.then(|| Vrrp {
        interface,
        api_router_id: api_id,
        ingress_router_id: ingress_id,
        advert_interval,
        api_prefix: prefix[0],
        ingress_prefix: prefix[1],
    })
}
