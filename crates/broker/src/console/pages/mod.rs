//! One module per page. Each page function takes the request's [`Page`] and
//! returns a whole response; actions (POSTs) answer with a redirect to the
//! page they changed, or with the error the broker gave.

pub mod broker;
pub mod groups;
pub mod messages;
pub mod overview;
pub mod topics;

use super::history::History;
use super::html::{self, Frame};
use super::http::{Request, Response};
use super::kafka::Kafka;
use crate::server::Broker;

/// What a page is rendered from.
pub struct Page<'a> {
    pub kafka: Kafka<'a>,
    pub history: &'a History,
    pub request: &'a Request,
    pub csrf: &'a str,
    pub user: &'a str,
    pub now_ms: i64,
}

impl<'a> Page<'a> {
    pub fn new(
        broker: &'a Broker,
        history: &'a History,
        request: &'a Request,
        csrf: &'a str,
        user: &'a str,
        client_host: String,
    ) -> Self {
        let kafka = Kafka { broker, client_host, principal: format!("User:{user}").into() };
        Self { kafka, history, request, csrf, user, now_ms: strom_storage::now_ms() }
    }

    pub fn broker(&self) -> &'a Broker {
        self.kafka.broker
    }

    /// A page in the console's frame, with the notice or error a redirect passed.
    pub fn render(&self, title: &str, section: &str, body: &str) -> Response {
        let frame = Frame {
            title,
            section,
            user: self.user,
            notice: Some(self.request.param("notice")),
            error: Some(self.request.param("error")),
        };
        Response::html(200, html::page(&frame, body))
    }

    /// An action refused: the reason, and the way back.
    pub fn refused(&self, status: u16, section: &str, back: &str, reason: &str) -> Response {
        let frame = Frame { title: "Not done", section, user: self.user, notice: None, error: Some(reason) };
        let body = format!(r#"<p><a href="{}">Back</a></p>"#, html::escape(back));
        Response::html(status, html::page(&frame, &body))
    }

    pub fn form(&self) -> std::collections::BTreeMap<String, String> {
        self.request.form()
    }
}

/// Finds the page for a request.
pub fn route(page: &Page<'_>) -> Response {
    let request = page.request;
    match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/") => overview::page(page),
        ("GET", "/topics") => topics::list(page),
        ("POST", "/topics/create") => topics::create(page),
        ("GET", "/topic") => topics::detail(page),
        ("POST", "/topic/delete") => topics::delete(page),
        ("POST", "/topic/partitions") => topics::add_partitions(page),
        ("POST", "/topic/config") => topics::alter_config(page),
        ("GET", "/messages") => messages::page(page),
        ("POST", "/messages/produce") => messages::produce(page),
        ("GET", "/groups") => groups::list(page),
        ("GET", "/group") => groups::detail(page),
        ("POST", "/group/reset") => groups::reset(page),
        ("POST", "/group/delete") => groups::delete(page),
        ("GET", "/broker") => broker::page(page),
        _ => page.refused(404, "", "/", "no such page"),
    }
}
