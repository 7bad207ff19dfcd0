//! One integration-test binary (as in `just`): every test drives the real `iteragpu` binary.

#[path = "integration/agreement.rs"]
mod agreement;
#[path = "integration/bounds.rs"]
mod bounds;
#[path = "integration/common.rs"]
mod common;
#[path = "integration/contract.rs"]
mod contract;
#[path = "integration/estimate.rs"]
mod estimate;
#[path = "integration/explain.rs"]
mod explain;
#[path = "integration/honesty.rs"]
mod honesty;
#[path = "integration/hub.rs"]
mod hub;
#[path = "integration/hub_scripts.rs"]
mod hub_scripts;
#[path = "integration/hub_server.rs"]
mod hub_server;
#[path = "integration/launch.rs"]
mod launch;
#[path = "integration/launch_ranks.rs"]
mod launch_ranks;
#[path = "integration/lifetimes.rs"]
mod lifetimes;
#[path = "integration/limits.rs"]
mod limits;
#[path = "integration/measure.rs"]
mod measure;
#[path = "integration/newest.rs"]
mod newest;
#[path = "integration/notebook.rs"]
mod notebook;
#[path = "integration/optimizers.rs"]
mod optimizers;
#[path = "integration/outputs.rs"]
mod outputs;
#[path = "integration/packed.rs"]
mod packed;
#[path = "integration/predict.rs"]
mod predict;
#[path = "integration/predict_built_once.rs"]
mod predict_built_once;
#[path = "integration/predict_fork.rs"]
mod predict_fork;
#[path = "integration/predict_one_trace.rs"]
mod predict_one_trace;
#[path = "integration/predict_scripts.rs"]
mod predict_scripts;
#[path = "integration/predict_speed.rs"]
mod predict_speed;
#[path = "integration/predicted_documents.rs"]
mod predicted_documents;
#[path = "integration/properties.rs"]
mod properties;
#[path = "integration/published.rs"]
mod published;
#[path = "integration/quantized.rs"]
mod quantized;
#[path = "integration/quantized_scripts.rs"]
mod quantized_scripts;
#[path = "integration/report.rs"]
mod report;
#[path = "integration/requests.rs"]
mod requests;
#[path = "integration/serving.rs"]
mod serving;
#[path = "integration/signals.rs"]
mod signals;
#[path = "integration/slurm.rs"]
mod slurm;
#[path = "integration/snapshot.rs"]
mod snapshot;
#[path = "integration/snapshot_explain.rs"]
mod snapshot_explain;
#[path = "integration/sweep.rs"]
mod sweep;
#[path = "integration/torchrun.rs"]
mod torchrun;
#[path = "integration/trainers.rs"]
mod trainers;
#[path = "integration/user_ddp.rs"]
mod user_ddp;
#[path = "integration/user_fsdp.rs"]
mod user_fsdp;
#[path = "integration/vision.rs"]
mod vision;
#[path = "integration/vlm.rs"]
mod vlm;
#[path = "integration/wheel.rs"]
mod wheel;
#[path = "integration/workloads.rs"]
mod workloads;
