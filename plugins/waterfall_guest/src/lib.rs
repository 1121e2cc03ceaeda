//! WIT glue shared by the waterfall components: converts `weir:plugin/scaling` records to the
//! plain types of `weir-waterfall` and back. Each component crate only picks its [`Flavor`].

use std::marker::PhantomData;

use weir_waterfall::{Flavor, Policy};

wit_bindgen::generate!({
    world: "policy",
    path: "../../wit",
    default_bindings_module: "waterfall_guest",
    pub_export_macro: true,
    export_macro_name: "export_policy",
});

use exports::weir::plugin::scaling as wit;

/// Picks the content flavor of a waterfall component.
pub trait Flavored: 'static {
    const FLAVOR: Flavor;
}

/// The component: `export_policy!(Waterfall<YourFlavor>)` through a type alias.
pub struct Waterfall<F>(PhantomData<F>);

impl<F: Flavored> wit::Guest for Waterfall<F> {
    type Engine = Engine<F>;
}

pub struct Engine<F> {
    policy: Policy,
    flavor: PhantomData<F>,
}

impl<F: Flavored> wit::GuestEngine for Engine<F> {
    fn create(content: String) -> Result<wit::Engine, String> {
        let policy = Policy::parse(F::FLAVOR, &content).map_err(|e| e.to_string())?;
        Ok(wit::Engine::new(Engine::<F> { policy, flavor: PhantomData }))
    }

    fn tiers(&self) -> Vec<wit::Tier> {
        self.policy.tiers().into_iter().map(convert::tier_to_wit).collect()
    }

    fn decide(&self, snapshot: wit::Snapshot) -> Vec<wit::Decision> {
        let snapshot = convert::snapshot_from_wit(snapshot);
        self.policy.decide(&snapshot).into_iter().map(convert::decision_to_wit).collect()
    }
}

/// The conversions `weir-waterfall` writes once for host and guests.
mod convert {
    use super::wit;
    weir_waterfall::wit_conversions!(wit);
}
