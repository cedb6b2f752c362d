//! `host.api.kubeconfig`: read and checked when the site loads, as kubectl
//! reads it (current context, its cluster and user); every problem at once,
//! naming the kubeconfig and the key in it, never quoting a key or token.

mod common;
use base64::Engine;
use common::{assert_problems, lab};

const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBcert0123\n-----END CERTIFICATE-----\n";
const KEY: &str =
    "-----BEGIN PRIVATE KEY-----\nMIIEsecretKEYmaterial000\n-----END PRIVATE KEY-----\n";
const TOKEN: &str = "sha256~t0ken-never-printed";

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The lab site with `host.api` and `kubeconfig: kube/config` holding `kc`.
fn site_with(kc: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let (dir, path) = lab(|t| {
        t.replace(
            "host:\n",
            "host:\n  api:\n    listen: 127.0.0.1:9443\n    tokens: { file: api-tokens }\n    kubeconfig: kube/config\n",
        )
    });
    std::fs::create_dir_all(dir.path().join("kube")).unwrap();
    std::fs::write(dir.path().join("kube/config"), kc).unwrap();
    (dir, path)
}

fn valid() -> String {
    format!(
        "apiVersion: v1\nkind: Config\npreferences: {{}}\ncurrent-context: admin\n\
         clusters:\n- name: other\n  cluster: {{server: \"https://elsewhere:6443\"}}\n\
         - name: lab\n  cluster:\n    server: https://api.lab.example.test:6443/\n    certificate-authority-data: {}\n\
         contexts:\n- name: admin\n  context: {{cluster: lab, user: admin, namespace: default}}\n\
         users:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(CERT),
        b64(CERT),
        b64(KEY)
    )
}

#[test]
fn a_client_certificate_kubeconfig_is_read_into_the_model() {
    let (_dir, path) = site_with(&valid());
    let s = site::load(&path).unwrap();
    let k = s.host.api.as_ref().unwrap().kubeconfig.as_ref().unwrap();
    assert_eq!(k.server, "https://api.lab.example.test:6443");
    assert_eq!(k.context, "admin");
    assert_eq!(k.ca_pem, CERT.as_bytes());
    match &k.auth {
        site::KubeAuth::ClientCert { cert_pem, key_pem } => {
            assert_eq!(cert_pem, CERT.as_bytes());
            assert_eq!(key_pem.expose(), KEY.as_bytes());
        }
        a => panic!("{a:?}"),
    }
    let shown = format!("{s:?}");
    assert!(!shown.contains("secretKEY"), "the key is never printed");
}

#[test]
fn a_token_from_a_file_next_to_the_kubeconfig() {
    let kc = "current-context: c\nclusters:\n- name: k\n  cluster:\n    server: https://10.0.0.5:6443\n    certificate-authority: ca.crt\n\
         contexts:\n- name: c\n  context: {cluster: k, user: u}\nusers:\n- name: u\n  user: {tokenFile: token}\n";
    let (dir, path) = site_with(kc);
    std::fs::write(dir.path().join("kube/ca.crt"), CERT).unwrap();
    std::fs::write(dir.path().join("kube/token"), format!("{TOKEN}\n")).unwrap();
    let s = site::load(&path).unwrap();
    let k = s.host.api.unwrap().kubeconfig.unwrap();
    assert_eq!(k.auth, site::KubeAuth::Token(site::Secret(TOKEN.into())));
    assert!(!format!("{k:?}").contains(TOKEN));
}

#[test]
fn every_problem_at_once_with_the_key_and_no_secret() {
    let kc = format!(
        "current-context: admin\nclusters:\n- name: lab\n  cluster:\n    server: http://api:6443\n    insecure-skip-tls-verify: true\n    tls-server-name: api\n\
         contexts:\n- name: admin\n  context: {{cluster: lab, user: admin}}\n\
         users:\n- name: admin\n  user:\n    client-certificate-data: \"%%{TOKEN}\"\n    exec: {{command: oc}}\n"
    );
    let (_dir, path) = site_with(&kc);
    let e = site::load(&path).unwrap_err();
    assert_problems(
        &e,
        &[
            "clusters[0].cluster.server: not an https:// URL",
            "clusters[0].cluster.insecure-skip-tls-verify: not supported",
            "clusters[0].cluster.tls-server-name: not supported",
            "clusters[0].cluster.certificate-authority-data: required",
            "users[0].user.exec: not supported",
            "users[0].user.client-certificate-data: not base64",
            "users[0].user.client-key-data: required with the client certificate",
        ],
    );
    let text = e.to_string();
    assert!(text.contains("kube/config"), "names the kubeconfig: {text}");
    assert!(text.contains("host.api.kubeconfig"), "{text}");
    assert!(!text.contains(TOKEN), "never quotes a value: {text}");
}

#[test]
fn missing_file_context_user_and_pem_kinds() {
    let (dir, path) = site_with("current-context: nope\ncontexts: []\n");
    assert_problems(
        &site::load(&path).unwrap_err(),
        &["current-context: no context named \"nope\" in contexts"],
    );
    std::fs::remove_file(dir.path().join("kube/config")).unwrap();
    assert_problems(&site::load(&path).unwrap_err(), &["host.api.kubeconfig: "]);
    // A key where the certificate goes, a certificate where the key goes,
    // a user that is not in the file.
    let kc = valid().replacen(&b64(CERT), &b64(KEY), 1).replace(
        &format!("client-key-data: {}", b64(KEY)),
        &format!("client-key-data: {}", b64(CERT)),
    );
    let (_d, path) = site_with(&kc);
    assert_problems(
        &site::load(&path).unwrap_err(),
        &[
            "clusters[1].cluster.certificate-authority-data: no PEM CERTIFICATE",
            "users[0].user.client-key-data: no unencrypted PEM private key",
        ],
    );
    let (_d, path) =
        site_with(&valid().replace("user: admin, namespace", "user: ghost, namespace"));
    assert_problems(
        &site::load(&path).unwrap_err(),
        &["contexts[0].context.user: no user named \"ghost\" in users"],
    );
    let (_d, path) = site_with("current-context: [\n");
    assert_problems(&site::load(&path).unwrap_err(), &[": not YAML (line"]);
}
