//! The forwarding every provider's `impl Provider` shares.

/// Inside each provider's `impl Provider`: `name`, and `find`, `create`
/// (with the node's `provider.<name>` section as the provider's typed
/// spec), `get` and `delete` forwarded to the provider's own methods.
macro_rules! forward_provider_calls {
    ($ty:ident, $name:expr, $spec:ty) => {
        fn name(&self) -> &'static str {
            $name
        }
        fn find<'a>(
            &'a self,
            node: &'a $crate::providers::NodeRequest,
        ) -> $crate::providers::BoxFuture<
            'a,
            $crate::providers::Result<Option<$crate::providers::Machine>>,
        > {
            Box::pin($ty::find(self, node))
        }
        fn create<'a>(
            &'a self,
            node: &'a $crate::providers::NodeRequest,
            spec: &'a serde_json::Value,
        ) -> $crate::providers::BoxFuture<'a, $crate::providers::Result<$crate::providers::Machine>>
        {
            Box::pin(async move {
                $ty::create(
                    self,
                    node,
                    &$crate::providers::typed_spec::<$spec>($name, spec)?,
                )
                .await
            })
        }
        fn get<'a>(
            &'a self,
            id: &'a str,
        ) -> $crate::providers::BoxFuture<
            'a,
            $crate::providers::Result<Option<$crate::providers::Machine>>,
        > {
            Box::pin($ty::get(self, id))
        }
        fn delete<'a>(
            &'a self,
            id: &'a str,
        ) -> $crate::providers::BoxFuture<'a, $crate::providers::Result<()>> {
            Box::pin($ty::delete(self, id))
        }
    };
}
