//! The served kinds of each API for a dynamic client: the operator's writes to the objects
//! themselves, its mirror and policy finalizer, and the plugin, all name them from here.

use kube::api::ApiResource;

use crate::schema::Api;

/// Skyhooks or NodeWrights.
pub fn object_resource(api: Api) -> ApiResource {
    ApiResource {
        group: api.group().to_string(),
        version: "v1alpha1".to_string(),
        api_version: api.api_version().to_string(),
        kind: api.kind().to_string(),
        plural: api.plural().to_string(),
    }
}

/// The DeploymentPolicies of `api`'s group.
pub fn policy_resource(api: Api) -> ApiResource {
    ApiResource {
        kind: "DeploymentPolicy".to_string(),
        plural: "deploymentpolicies".to_string(),
        ..object_resource(api)
    }
}
