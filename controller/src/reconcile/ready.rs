//! When a node is Ready: what its boot kind needs (a network boot and its
//! Ignition, or only its Ignition), the provider's finish after the
//! Ignition, and the deadline with a message that says what never came.

use super::*;

/// Once the node fetched its Ignition: the provider's [`Provider::finish`]
/// (a BMC ejects the virtual media), retried while it fails transiently.
pub(super) async fn finish(
    ctl: &Controller,
    name: &str,
    provider: &dyn crate::providers::Provider,
    id: &str,
) -> Result<Option<Next>, StoreError> {
    let served = ctl
        .store
        .conditions(name)?
        .iter()
        .any(|c| c.kind == IGNITION_SERVED && c.status == "True");
    if !served {
        return Ok(None);
    }
    match provider.finish(id).await {
        Ok(()) => Ok(None),
        Err(e) if e.is_transient() => Ok(Some(provider_failed(ctl, name, e))),
        Err(e) => {
            warn!(node = %name, error = %e, "after its Ignition");
            ctl.note(name, events::PROVIDER, format!("after its Ignition: {e}"));
            Ok(None)
        }
    }
}

pub(super) fn past_deadline(ctl: &Controller, row: &NodeRow, kind: BootKind) -> Option<Next> {
    if deadline_left(ctl, row) > Duration::ZERO {
        return None;
    }
    let conds = ctl.store.conditions(&row.name).unwrap_or_default();
    let is = |k: &str| conds.iter().any(|c| c.kind == k && c.status == "True");
    let wanted: &[&str] = match kind {
        BootKind::Network => &[PROVISIONED, NETWORK_BOOTED, IGNITION_SERVED],
        BootKind::Image | BootKind::Media => &[PROVISIONED, IGNITION_SERVED],
    };
    let waiting = wanted.iter().copied().find(|k| !is(k));
    if kind == BootKind::Image && waiting == Some(IGNITION_SERVED) {
        // The machine runs, but what it booted never asked for its config.
        let msg = format!(
            "the machine is active but its image never fetched its Ignition within {:?}: \
             the pointer config in its user data was not followed (does the image run \
             Ignition, and can it reach this host's Ignition URL?)",
            ctl.deadline()
        );
        fail_with(
            ctl,
            &row.name,
            &msg,
            Some(cond(IGNITION_SERVED, "False", "NeverFetched", &msg)),
        );
        return Some(Next::Idle);
    }
    fail(
        ctl,
        &row.name,
        &format!(
            "not Ready within {:?}: still waiting for {}",
            ctl.deadline(),
            waiting.unwrap_or(READY)
        ),
    );
    Some(Next::Idle)
}

/// After the machine is up (`provisioned`, written with the phase): Ready
/// once it did what its boot kind needs (network-booted and fetched its
/// Ignition, or, booting an image, fetched its Ignition).
pub(super) fn boot_step(
    ctl: &Controller,
    row: &NodeRow,
    provisioned: Condition,
    kind: BootKind,
) -> Result<Next, StoreError> {
    let name = row.name.as_str();
    let conds = ctl.store.conditions(name)?;
    let is = |k: &str| conds.iter().any(|c| c.kind == k && c.status == "True");
    let boot = match conds.iter().find(|c| c.kind == BOOT_KIND) {
        Some(c) if c.reason == kind.as_str() => c.clone(),
        _ => boot_kind_condition(kind, now_ms()),
    };
    let booted = kind != BootKind::Network || is(NETWORK_BOOTED);
    if booted && is(IGNITION_SERVED) {
        let ready = cond(
            READY,
            "True",
            "IgnitionServed",
            match kind {
                BootKind::Network => "network-booted and fetched its Ignition",
                BootKind::Image => "booted its image and fetched its Ignition",
                BootKind::Media => "booted its virtual media and fetched its Ignition",
            },
        );
        ctl.store
            .set_phase_and_conditions(name, "Ready", "", &[provisioned, boot, ready])?;
        ctl.note(name, events::API, "Ready");
        info!(node = %name, kind = kind.as_str(), "node Ready");
        return Ok(Next::Idle);
    }
    let (phase, reason, msg) = match kind {
        BootKind::Image => (
            "Booting",
            "WaitingForIgnition",
            "booting its image; waiting for it to fetch its Ignition",
        ),
        BootKind::Media => (
            "Booting",
            "WaitingForIgnition",
            "booting its virtual media; waiting for it to fetch its Ignition",
        ),
        BootKind::Network if booted => (
            "Booting",
            "WaitingForIgnition",
            "network-booted; waiting for it to fetch its Ignition",
        ),
        BootKind::Network => (
            "Provisioned",
            "WaitingForNetworkBoot",
            "waiting for the machine to network-boot",
        ),
    };
    let ready = cond(READY, "False", reason, msg);
    ctl.store
        .set_phase_and_conditions(name, phase, msg, &[provisioned, boot, ready])?;
    Ok(past_deadline(ctl, row, kind).unwrap_or(Next::Poll))
}
