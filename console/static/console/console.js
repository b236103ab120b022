"use strict";
// A <select data-submit-on-change> submits its form when it changes (the review queue's tenant
// filter). A file, not an onchange attribute: the Content-Security-Policy allows no inline script.
document.addEventListener("change", (event) => {
    const select = event.target.closest("select[data-submit-on-change]");
    if (select) {
        select.form.submit();
    }
});
